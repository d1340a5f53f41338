#include "chorus/server/training/job_journal.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "chorus/common/file_util.h"
#include "chorus/common/status_matchers.h"

namespace chorus {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

training::JobSpec SpecNamed(const std::string& name) {
  training::JobSpec spec;
  spec.set_name(name);
  spec.set_archive("/models/llama3.pt");
  spec.set_checkpoint_dir("/checkpoints/" + name);
  spec.set_checkpoint_interval(50);
  spec.mutable_optimizer()->set_lr(3e-4);
  return spec;
}

class JobJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(dir_, ScopedTempDir::Create("job-journal-test-"));
    path_ = dir_.path() + "/jobs.json";
  }
  ScopedTempDir dir_;
  std::string path_;
};

TEST_F(JobJournalTest, ANewServerFindsTheJobsRecordedAndNotRemoved) {
  {
    JobJournal journal(path_);
    ASSERT_OK_AND_ASSIGN(std::vector<JobJournal::Entry> none, journal.Open());
    EXPECT_THAT(none, IsEmpty());
    ASSERT_OK(journal.Put("job-1", SpecNamed("a")));
    ASSERT_OK(journal.Put("job-2", SpecNamed("b")));
    ASSERT_OK(journal.Put("job-3", SpecNamed("c")));
    ASSERT_OK(journal.Remove("job-2"));
    ASSERT_OK(journal.Remove("job-404"));
  }
  JobJournal reopened(path_);
  ASSERT_OK_AND_ASSIGN(std::vector<JobJournal::Entry> jobs, reopened.Open());
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].id, "job-1");
  EXPECT_EQ(jobs[0].spec.SerializeAsString(), SpecNamed("a").SerializeAsString());
  EXPECT_EQ(jobs[1].id, "job-3");
  EXPECT_EQ(jobs[1].spec.checkpoint_interval(), 50);
  // What Open found stays recorded through later changes.
  ASSERT_OK(reopened.Remove("job-3"));
  JobJournal third(path_);
  ASSERT_OK_AND_ASSIGN(std::vector<JobJournal::Entry> left, third.Open());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].id, "job-1");
}

TEST_F(JobJournalTest, IdsAreNeverGivenOutTwiceAcrossServingProcesses) {
  {
    JobJournal journal(path_);
    ASSERT_OK(journal.Open().status());
    ASSERT_OK_AND_ASSIGN(std::string first, journal.NewId());
    ASSERT_OK_AND_ASSIGN(std::string second, journal.NewId());
    EXPECT_EQ(first, "job-1");
    EXPECT_EQ(second, "job-2");  // neither recorded as a job: the counter still moves
  }
  JobJournal next_process(path_);
  ASSERT_OK(next_process.Open().status());
  ASSERT_OK_AND_ASSIGN(std::string third, next_process.NewId());
  EXPECT_EQ(third, "job-3");
}

// Found by job_journal_fuzzer (UBSan: signed overflow past the last id).
TEST_F(JobJournalTest, TheLastPossibleIdIsNeverFollowedByAnOverflow) {
  ASSERT_OK(WriteFileAtomically(path_, R"({"format": "chorus-jobs", "format_version": 1,
      "jobs": {"job-9223372036854775807": {"name": "last"}}})"));
  JobJournal journal(path_);
  ASSERT_OK_AND_ASSIGN(std::vector<JobJournal::Entry> jobs, journal.Open());
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_THAT(journal.NewId().status(),
              StatusIs(StatusCode::kResourceExhausted, HasSubstr("job-9223372036854775807")));

  ASSERT_OK(WriteFileAtomically(
      path_, R"({"format": "chorus-jobs", "format_version": 1, "next_id": 9223372036854775806})"));
  JobJournal counted(path_);
  ASSERT_OK(counted.Open().status());
  ASSERT_OK_AND_ASSIGN(std::string last, counted.NewId());
  EXPECT_EQ(last, "job-9223372036854775806");
  EXPECT_EQ(counted.NewId().status().code(), StatusCode::kResourceExhausted);
}

TEST_F(JobJournalTest, AFileThatIsNotAJournalIsDataLossNamingIt) {
  const std::pair<const char*, const char*> cases[] = {
      {"not json", "no \"format\""},
      {R"({"format": 1})", "no \"format\""},  // wrong types are errors, not exceptions
      {R"({"format": "chorus-jobs", "format_version": "1"})", "format_version"},
      {R"({"format": "chorus-jobs", "format_version": 9, "jobs": {}})", "format_version"},
      {R"({"format": "chorus-jobs", "format_version": 1, "jobs": []})", "\"jobs\""},
      {R"({"format": "chorus-jobs", "format_version": 1, "jobs": {"job-1": {"nme": 1}}})", "job-1"},
  };
  for (const auto& [text, why] : cases) {
    ASSERT_OK(WriteFileAtomically(path_, text));
    JobJournal journal(path_);
    EXPECT_THAT(journal.Open().status(),
                StatusIs(StatusCode::kDataLoss, AllOf(HasSubstr(path_), HasSubstr(why))))
        << text;
  }
}

TEST_F(JobJournalTest, WithoutAPathNothingIsRecorded) {
  JobJournal off("");
  ASSERT_OK(off.Put("job-1", SpecNamed("a")));
  ASSERT_OK_AND_ASSIGN(std::vector<JobJournal::Entry> jobs, off.Open());
  EXPECT_THAT(jobs, IsEmpty());
}

}  // namespace
}  // namespace chorus
