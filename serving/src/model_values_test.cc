#include "chorus/serving/model_values.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "chorus/common/status_matchers.h"

namespace chorus {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

StringTensor Grid() { return {{2, 3}, {"a", "b", "c", "d", "", std::string("\xff\x00z", 3)}}; }

TEST(ModelValuesTest, StringTensorsNestOncePerDimensionAsTypedLists) {
  const c10::IValue value = StringTensorToIValue(Grid());
  ASSERT_TRUE(value.isList());
  // TorchScript checks arguments by type: List[List[str]], not List[Any].
  EXPECT_EQ(value.type()->annotation_str(), "List[List[str]]");
  ASSERT_EQ(value.toListRef().size(), 2u);
  EXPECT_EQ(value.toListRef()[1].toListRef()[2].toStringRef(), std::string("\xff\x00z", 3));
  EXPECT_EQ(StringTensorToIValue({{2}, {"x", "y"}}).type()->annotation_str(), "List[str]");
  EXPECT_EQ(StringTensorToIValue({{}, {"alone"}}).toStringRef(), "alone");
}

TEST(ModelValuesTest, FilledValuesTakeTheDtypeAndShape) {
  EXPECT_THAT(WithAnySizeAsOne({-1, 3, -1}), ElementsAre(1, 3, 1));
  const at::Tensor ones = FilledValue("int32", {2, 3}, 1).toTensor();
  EXPECT_EQ(ones.scalar_type(), at::kInt);
  EXPECT_THAT(ones.sizes(), ElementsAre(2, 3));
  EXPECT_EQ(ones.sum().item<int64_t>(), 6);
  EXPECT_EQ(FilledValue("bool", {1}, 1).toTensor().item<bool>(), true);
  EXPECT_EQ(FilledValue("float64", {4}).toTensor().abs().sum().item<double>(), 0.0);
  ASSERT_OK_AND_ASSIGN(StringTensor empty, StringTensorFromIValue(FilledValue("string", {2, 1})));
  EXPECT_THAT(empty.shape, ElementsAre(2, 1));
  EXPECT_THAT(empty.elements, ElementsAre("", ""));
}

TEST(ModelValuesTest, StringTensorsRoundTrip) {
  for (StringTensor tensor : {Grid(), StringTensor{{0}, {}}, StringTensor{{}, {"0-d"}},
                              StringTensor{{1, 1, 2}, {"p", "q"}}}) {
    StatusOr<StringTensor> back = StringTensorFromIValue(StringTensorToIValue(tensor));
    ASSERT_OK(back);
    EXPECT_EQ(back->shape, tensor.shape);
    EXPECT_EQ(back->elements, tensor.elements);
  }
}

TEST(ModelValuesTest, RaggedOrMixedListsAreRefusedSayingWhere) {
  c10::impl::GenericList ragged(c10::ListType::create(c10::StringType::get()));
  ragged.push_back(c10::List<std::string>({"a", "b"}));
  ragged.push_back(c10::List<std::string>({"c"}));
  EXPECT_THAT(StringTensorFromIValue(ragged),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("element [1] of a string tensor "
                                                               "has 1 items; the first at its "
                                                               "level has 2")));
  c10::impl::GenericList mixed(c10::AnyType::get());
  mixed.push_back(std::string("a"));
  mixed.push_back(int64_t{7});
  EXPECT_THAT(StringTensorFromIValue(mixed),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("element [1] of a string tensor "
                                                               "is Int, not a str")));
  EXPECT_THAT(StringTensorFromIValue(c10::IValue(3.5)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("the value")));
}

TEST(ModelValuesTest, TellsStringValuesFromTensors) {
  EXPECT_TRUE(IsStringValue(StringTensorToIValue(Grid())));
  EXPECT_TRUE(IsStringValue(c10::IValue(std::string("s"))));
  EXPECT_FALSE(IsStringValue(at::ones({2})));
  EXPECT_FALSE(IsStringValue(c10::List<at::Tensor>({at::ones({1})})));
  EXPECT_FALSE(IsStringValue(c10::List<std::string>()));  // empty: only a signature can tell
}

TEST(ModelValuesTest, BatchesStringsAlongTheFirstDimension) {
  const c10::IValue a = StringTensorToIValue({{1, 2}, {"a0", "a1"}});
  const c10::IValue b = StringTensorToIValue({{2, 2}, {"b0", "b1", "b2", "b3"}});
  const c10::IValue joined = ConcatValues({a, b}, 0);
  EXPECT_THAT(ShapeOf(joined), ElementsAre(3, 2));
  EXPECT_EQ(joined.type()->annotation_str(), "List[List[str]]");
  StatusOr<StringTensor> rows = StringTensorFromIValue(SliceValue(joined, 0, 1, 2));
  ASSERT_OK(rows);
  EXPECT_THAT(rows->shape, ElementsAre(2, 2));
  EXPECT_THAT(rows->elements, ElementsAre("b0", "b1", "b2", "b3"));
}

TEST(ModelValuesTest, BatchesTensorsAlongAnyDimension) {
  const c10::IValue joined = ConcatValues({at::zeros({2, 1}), at::ones({2, 3})}, 1);
  EXPECT_THAT(ShapeOf(joined), ElementsAre(2, 4));
  const at::Tensor slice = SliceValue(joined, 1, 1, 3).toTensor();
  EXPECT_TRUE(at::equal(slice, at::ones({2, 3})));
}

}  // namespace
}  // namespace chorus
