// InterpreterPlacement on a real manager: jobs hold interpreters alone and
// model calls avoid them; engines are never placed on a job's interpreters;
// leases give interpreters back.
#include "chorus/interpreter/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <utility>

#include "chorus/common/status_matchers.h"

namespace chorus {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int kInterpreters = 4;

class PlacementTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    InterpreterManagerOptions options;
    options.num_interpreters = kInterpreters;
    options.preload_modules = {};  // placement needs no torch
    manager_ = InterpreterManager::Create(options).value().release();
  }
  static void TearDownTestSuite() { delete manager_; }

  static InterpreterManager* manager_;
};
InterpreterManager* PlacementTest::manager_ = nullptr;

TEST_F(PlacementTest, JobsTakeTheLowestAndEnginesTheHighestInterpreters) {
  InterpreterPlacement placement(manager_);
  ASSERT_OK_AND_ASSIGN(InterpreterLease job, placement.HoldExclusive(2, "training job j"));
  ASSERT_OK_AND_ASSIGN(InterpreterLease engines, placement.PinShared(1, "model llm version 1"));
  EXPECT_THAT(job.interpreters(), ElementsAre(0, 1));
  EXPECT_THAT(engines.interpreters(), ElementsAre(3));
  EXPECT_EQ(placement.OwnersOf(0), "training job j");
  EXPECT_EQ(placement.OwnersOf(3), "model llm version 1");
  EXPECT_EQ(placement.OwnersOf(2), "");
}

TEST_F(PlacementTest, AJobNeverGetsAnEnginesInterpreterNorAnEngineAJobs) {
  InterpreterPlacement placement(manager_);
  ASSERT_OK_AND_ASSIGN(InterpreterLease engines, placement.PinShared(2, "model llm version 1"));
  EXPECT_THAT(engines.interpreters(), ElementsAre(3, 2));
  EXPECT_THAT(placement.HoldExclusive(3, "training job big").status(),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("3 ranks need as many interpreters; the server has 4 and "
                                       "2 are free"),
                             HasSubstr("3: model llm version 1"))));
  ASSERT_OK_AND_ASSIGN(InterpreterLease job, placement.HoldExclusive(2, "training job j"));
  EXPECT_THAT(job.interpreters(), ElementsAre(0, 1));
  // With every interpreter taken, engines of another model share the pinned
  // ones, never the job's.
  ASSERT_OK_AND_ASSIGN(InterpreterLease more, placement.PinShared(4, "model other version 1"));
  EXPECT_EQ(std::set<int>(more.interpreters().begin(), more.interpreters().end()),
            (std::set<int>{2, 3}));
}

TEST_F(PlacementTest, NoEngineIsPlacedWhenJobsHoldEveryInterpreter) {
  InterpreterPlacement placement(manager_);
  ASSERT_OK_AND_ASSIGN(InterpreterLease job, placement.HoldExclusive(4, "training job all"));
  EXPECT_THAT(placement.PinShared(1, "model llm version 1").status(),
              StatusIs(StatusCode::kFailedPrecondition,
                       HasSubstr("every interpreter runs a training job")));
}

TEST_F(PlacementTest, ModelCallsAvoidAJobsInterpretersWhileOthersAreLeft) {
  InterpreterPlacement placement(manager_);
  ASSERT_OK_AND_ASSIGN(InterpreterLease job, placement.HoldExclusive(3, "training job j"));
  for (int i = 0; i < 8; ++i) {
    InterpreterSession session = manager_->AcquireOne();
    EXPECT_EQ(session.index(), 3);
  }
}

TEST_F(PlacementTest, ALeaseGivesItsInterpretersBackOnce) {
  InterpreterPlacement placement(manager_);
  {
    ASSERT_OK_AND_ASSIGN(InterpreterLease job, placement.HoldExclusive(4, "training job j"));
    InterpreterLease moved = std::move(job);
    EXPECT_THAT(job.interpreters(), IsEmpty());
    EXPECT_OK(placement.CheckExclusive(0));
    EXPECT_FALSE(placement.CheckExclusive(1).ok());
    moved.Release();
    moved.Release();
    EXPECT_OK(placement.CheckExclusive(4));
  }
  ASSERT_OK_AND_ASSIGN(InterpreterLease a, placement.PinShared(1, "model a version 1"));
  ASSERT_OK_AND_ASSIGN(InterpreterLease b, placement.PinShared(1, "model b version 1"));
  EXPECT_NE(a.interpreters(), b.interpreters());  // the least pinned first
  a.Release();
  EXPECT_EQ(placement.OwnersOf(b.interpreters()[0]), "model b version 1");
  EXPECT_OK(placement.CheckExclusive(3));
}

}  // namespace
}  // namespace chorus
