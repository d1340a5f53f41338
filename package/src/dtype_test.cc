#include "chorus/package/dtype.h"

#include <gtest/gtest.h>

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

TEST(DtypeTest, StringsAreBytesOnTheWire) {
  ASSERT_NE(DtypeByWireName("BYTES"), nullptr);
  EXPECT_EQ(DtypeByWireName("BYTES")->dtype, Dtype::kString);
  EXPECT_EQ(DtypeByName("string"), DtypeByWireName("BYTES"));
  EXPECT_EQ(DtypeByName("bytes"), nullptr);
}

}  // namespace
}  // namespace chorus
