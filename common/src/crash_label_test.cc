// CrashLabel: the text crash contexts start with, and reading it back.
#include "chorus/common/crash_label.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace chorus {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(CrashLabelTest, WritesWhatCrashReportsSay) {
  EXPECT_EQ(CrashLabel::Model("mlp", "3").text(), "model mlp version 3");
  EXPECT_EQ(CrashLabel::TrainingJob("job-7", 1).text(), "training job job-7 rank 1");
  EXPECT_EQ(CrashLabel().text(), "?");
}

TEST(CrashLabelTest, ReadsBackWhatItWrote) {
  const CrashLabel model = CrashLabel::Model("my model", "12");
  const CrashLabel job = CrashLabel::TrainingJob("job-3-ab12cd34", 0);
  const std::string record = model.text() + ", requests a, b\n" + job.text() + ", step\n";
  EXPECT_THAT(CrashLabelsIn(record), ElementsAre(model, job));
  EXPECT_EQ(CrashLabelsIn(record)[0].name(), "my model");
  EXPECT_EQ(CrashLabelsIn(record)[0].instance(), "12");
  EXPECT_EQ(CrashLabelsIn(record)[1].kind(), CrashLabel::Kind::kTrainingJob);
}

TEST(CrashLabelTest, ReadsEveryNestedLevelOnceInOrder) {
  const std::string record =
      "model a version 2, requests x, y > model b version 1, request (no id)\n"
      "model a version 2, request z\n";
  EXPECT_THAT(CrashLabelsIn(record),
              ElementsAre(CrashLabel::Model("a", "2"), CrashLabel::Model("b", "1")));
}

TEST(CrashLabelTest, IgnoresWhatIsNotALabel) {
  EXPECT_THAT(CrashLabelsIn(""), IsEmpty());
  EXPECT_THAT(CrashLabelsIn("\n\n"), IsEmpty());
  EXPECT_THAT(CrashLabelsIn("nothing chorus knows of (not a model call)\n"), IsEmpty());
  EXPECT_THAT(CrashLabelsIn("model noversion, request r\n"), IsEmpty());
  EXPECT_THAT(CrashLabelsIn("training job j rank x, step\n"), IsEmpty());
}

}  // namespace
}  // namespace chorus
