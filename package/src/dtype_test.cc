#include "chorus/package/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

namespace chorus {
namespace {

TEST(DtypeTest, TableIsIndexedByTheEnumAndNamesAreUnique) {
  std::set<std::string> names, wires;
  int index = 0;
  for (const DtypeInfo& info : kDtypes) {
    EXPECT_EQ(static_cast<int>(info.dtype), index++) << info.name;
    EXPECT_EQ(&InfoOf(info.dtype), &info);
    EXPECT_TRUE(names.insert(info.name).second) << info.name;
    EXPECT_TRUE(wires.insert(info.wire).second) << info.wire;
    // Only strings vary in size.
    EXPECT_EQ(info.element_size == 0, info.dtype == Dtype::kString) << info.name;
  }
  EXPECT_EQ(index, 14);
}

TEST(DtypeTest, LooksUpManifestAndWireNames) {
  ASSERT_NE(DtypeByName("bfloat16"), nullptr);
  EXPECT_EQ(DtypeByName("bfloat16")->dtype, Dtype::kBFloat16);
  EXPECT_STREQ(DtypeByName("float32")->wire, "FP32");
  ASSERT_NE(DtypeByWireName("INT64"), nullptr);
  EXPECT_STREQ(DtypeByWireName("INT64")->name, "int64");
  EXPECT_EQ(DtypeByWireName("INT64")->element_size, 8);
  // The two vocabularies do not mix, and case matters (KServe's names are upper case).
  EXPECT_EQ(DtypeByName("FP32"), nullptr);
  EXPECT_EQ(DtypeByWireName("float32"), nullptr);
  EXPECT_EQ(DtypeByWireName("fp32"), nullptr);
  EXPECT_EQ(DtypeByName("complex64"), nullptr);
  EXPECT_EQ(DtypeByWireName("STRING"), nullptr);
}

TEST(DtypeTest, HalfAndBFloat16RoundToNearestEven) {
  EXPECT_EQ(HalfFromFloat(1.0f), 0x3C00);
  EXPECT_EQ(HalfFromFloat(-2.0f), 0xC000);
  EXPECT_EQ(HalfFromFloat(0.1f), 0x2E66);
  EXPECT_EQ(HalfFromFloat(65504.0f), 0x7BFF);  // the largest half
  EXPECT_EQ(HalfFromFloat(1e6f), 0x7C00);      // beyond it: infinity
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isnan(HalfToFloat(HalfFromFloat(std::nanf("")))));

  EXPECT_EQ(BFloat16FromFloat(1.0f), 0x3F80);
  EXPECT_EQ(BFloat16FromFloat(0.1f), 0x3DCD);  // 0x3DCCCCCD rounds up
  // Ties go to the even neighbour: 0x3F808000 down to 0x3F80, 0x3F818000 up to 0x3F82.
  EXPECT_EQ(BFloat16FromFloat(1.00390625f), 0x3F80);
  EXPECT_EQ(BFloat16FromFloat(1.01171875f), 0x3F82);
  EXPECT_EQ(BFloat16FromFloat(std::nanf("")), 0x7FC0);
  EXPECT_EQ(BFloat16ToFloat(0xC040), -3.0f);
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float value = BFloat16ToFloat(static_cast<uint16_t>(bits));
    if (!std::isnan(value)) {
      ASSERT_EQ(BFloat16FromFloat(value), bits);
    }
    const float half = HalfToFloat(static_cast<uint16_t>(bits));
    if (!std::isnan(half)) {
      ASSERT_EQ(HalfFromFloat(half), bits);
    }
  }
}

TEST(DtypeTest, StringsAreBytesOnTheWire) {
  ASSERT_NE(DtypeByWireName("BYTES"), nullptr);
  EXPECT_EQ(DtypeByWireName("BYTES")->dtype, Dtype::kString);
  EXPECT_EQ(DtypeByName("string"), DtypeByWireName("BYTES"));
  EXPECT_EQ(DtypeByName("bytes"), nullptr);
}

}  // namespace
}  // namespace chorus
