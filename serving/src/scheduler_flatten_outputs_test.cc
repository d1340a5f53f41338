// FlattenOutputs on every shape of model output, on values built here: tensors,
// tuples, lists and dicts of them, lists of str; and what it refuses.
#include "chorus/serving/scheduler.h"

#include <ATen/ATen.h>
#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "chorus/common/status_matchers.h"
#include "chorus/package/manifest.h"

namespace chorus {
namespace {

using ::testing::HasSubstr;

Manifest WithOutputs(const std::vector<std::string>& names, const std::string& dtype = "float32") {
  Manifest manifest;
  for (const std::string& name : names) {
    manifest.outputs.push_back(TensorSpec{name, dtype, {-1}});
  }
  return manifest;
}

// Expects `got` to be exactly `want`: the same tensors (not copies), in order.
void ExpectSameTensors(const std::vector<c10::IValue>& got, const std::vector<at::Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].isTensor()) << "output " << i;
    EXPECT_TRUE(got[i].toTensor().is_same(want[i])) << "output " << i;
  }
}

c10::IValue Tuple(std::vector<c10::IValue> elements) {
  return c10::IValue(c10::ivalue::Tuple::create(std::move(elements)));
}

c10::IValue StringKeyedDict(const std::vector<std::pair<std::string, c10::IValue>>& items,
                            c10::TypePtr value_type) {
  c10::impl::GenericDict dict(c10::StringType::get(), std::move(value_type));
  for (const auto& [key, value] : items) dict.insert(c10::IValue(key), value);
  return c10::IValue(dict);
}

constexpr char kNotTensors[] =
    "the model must return a tensor or a list of str, or a tuple, list or dict of them (got ";

TEST(FlattenOutputsTest, ATensorIsTheOnlyOutput) {
  const at::Tensor a = at::ones({2});
  const Manifest manifest = WithOutputs({"y"});
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> with_manifest, FlattenOutputs(a, &manifest));
  ExpectSameTensors(with_manifest, {a});
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> without, FlattenOutputs(a, nullptr));
  ExpectSameTensors(without, {a});
}

TEST(FlattenOutputsTest, TuplesAndListsKeepTheirOrder) {
  const at::Tensor a = at::ones({2}), b = at::zeros({3});
  const Manifest manifest = WithOutputs({"first", "second"});
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> from_tuple,
                       FlattenOutputs(Tuple({a, b}), &manifest));
  ExpectSameTensors(from_tuple, {a, b});
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> from_list,
                       FlattenOutputs(c10::IValue(c10::List<at::Tensor>({b, a})), &manifest));
  ExpectSameTensors(from_list, {b, a});
  // Without a manifest any number of tensors is taken as it comes.
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> three, FlattenOutputs(Tuple({a, b, a}), nullptr));
  ExpectSameTensors(three, {a, b, a});
}

TEST(FlattenOutputsTest, DictsAreReadInManifestOrder) {
  const at::Tensor a = at::ones({2}), b = at::zeros({3}), c = at::full({1}, 7.0f);
  const Manifest manifest = WithOutputs({"first", "second"});
  // Inserted in the other order, with a key the manifest does not declare.
  const c10::IValue dict =
      StringKeyedDict({{"second", b}, {"extra", c}, {"first", a}}, c10::TensorType::get());
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> tensors, FlattenOutputs(dict, &manifest));
  ExpectSameTensors(tensors, {a, b});
}

TEST(FlattenOutputsTest, ADictMissingAnOutputOfTheManifestIsAnError) {
  const Manifest manifest = WithOutputs({"first", "second"});
  const c10::IValue dict = StringKeyedDict({{"first", at::ones({2})}}, c10::TensorType::get());
  EXPECT_THAT(FlattenOutputs(dict, &manifest),
              StatusIs(StatusCode::kInternal, "the model's output has no \"second\""));
}

TEST(FlattenOutputsTest, ADictNeedsAManifestToBeOrdered) {
  const c10::IValue dict = StringKeyedDict({{"first", at::ones({2})}}, c10::TensorType::get());
  EXPECT_THAT(FlattenOutputs(dict, nullptr),
              StatusIs(StatusCode::kInternal, std::string(kNotTensors) + "GenericDict)"));
}

TEST(FlattenOutputsTest, ValuesThatAreNotTensorsAreRefused) {
  const Manifest one = WithOutputs({"y"});
  const Manifest two = WithOutputs({"first", "second"});
  EXPECT_THAT(FlattenOutputs(c10::IValue(int64_t{3}), &one),
              StatusIs(StatusCode::kInternal, std::string(kNotTensors) + "Int)"));
  EXPECT_THAT(FlattenOutputs(Tuple({at::ones({2}), c10::IValue(int64_t{3})}), &two),
              StatusIs(StatusCode::kInternal, std::string(kNotTensors) + "Tuple)"));
  // Nested containers are not flattened.
  EXPECT_THAT(FlattenOutputs(Tuple({Tuple({at::ones({2}), at::ones({2})})}), nullptr),
              StatusIs(StatusCode::kInternal, std::string(kNotTensors) + "Tuple)"));
  EXPECT_THAT(FlattenOutputs(c10::IValue(c10::List<int64_t>({1, 2})), &two),
              StatusIs(StatusCode::kInternal, HasSubstr(kNotTensors)));
}

TEST(FlattenOutputsTest, AListOfStrIsOneStringOutput) {
  const c10::IValue words = c10::List<std::string>({"a", "b"});
  const Manifest one = WithOutputs({"words"}, "string");
  for (const Manifest* manifest : {&one, static_cast<const Manifest*>(nullptr)}) {
    ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> outputs, FlattenOutputs(words, manifest));
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_TRUE(outputs[0].is(words));
  }
  // Empty, it is a string output only because the signature says so.
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> empty,
                       FlattenOutputs(c10::List<std::string>(), &one));
  EXPECT_EQ(empty.size(), 1u);
}

TEST(FlattenOutputsTest, StringOutputsMixWithTensors) {
  const at::Tensor lengths = at::ones({2});
  const c10::IValue words = c10::List<std::string>({"a", "b"});
  Manifest manifest = WithOutputs({"words", "lengths"});
  manifest.outputs[0].dtype = "string";
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> outputs,
                       FlattenOutputs(Tuple({words, lengths}), &manifest));
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_TRUE(outputs[0].is(words));
  EXPECT_TRUE(outputs[1].toTensor().is_same(lengths));
  const c10::IValue dict =
      StringKeyedDict({{"lengths", lengths}, {"words", words}}, c10::AnyType::get());
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> from_dict, FlattenOutputs(dict, &manifest));
  ASSERT_EQ(from_dict.size(), 2u);
  EXPECT_TRUE(from_dict[0].is(words));
}

TEST(FlattenOutputsTest, ACountOtherThanTheManifestsIsAnError) {
  const Manifest manifest = WithOutputs({"first", "second"});
  const at::Tensor a = at::ones({2});
  EXPECT_THAT(
      FlattenOutputs(a, &manifest),
      StatusIs(StatusCode::kInternal, "the model returned 1 outputs; its manifest declares 2"));
  EXPECT_THAT(
      FlattenOutputs(Tuple({a, a, a}), &manifest),
      StatusIs(StatusCode::kInternal, "the model returned 3 outputs; its manifest declares 2"));
  EXPECT_THAT(
      FlattenOutputs(c10::IValue(c10::List<at::Tensor>()), &manifest),
      StatusIs(StatusCode::kInternal, "the model returned 0 outputs; its manifest declares 2"));
}

}  // namespace
}  // namespace chorus
