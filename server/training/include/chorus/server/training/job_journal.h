// The training jobs a serving process recreates when it starts: those created
// with a checkpoint directory, each under its id with the spec that made it.
// One JSON file, rewritten atomically on every change (format in
// docs/training.md, "Jobs that survive a restart"), so that a serving process
// that dies mid-write leaves the previous journal.
#ifndef CHORUS_SERVER_TRAINING_JOB_JOURNAL_H_
#define CHORUS_SERVER_TRAINING_JOB_JOURNAL_H_

#include <map>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/training/training_service.pb.h"

namespace chorus {

class JobJournal {
 public:
  struct Entry {
    std::string id;
    training::JobSpec spec;
  };

  // Journals to `path`; "" turns journaling off (every call succeeds, Open
  // finds nothing).
  explicit JobJournal(std::string path) : path_(std::move(path)) {}

  // The jobs recorded so far (none when the file does not exist yet), which
  // later changes keep. DATA_LOSS naming the file when it is not a journal.
  StatusOr<std::vector<Entry>> Open() CHORUS_EXCLUDES(mu_);
  // Records (or replaces) job `id`. Thread-safe.
  Status Put(const std::string& id, const training::JobSpec& spec) CHORUS_EXCLUDES(mu_);
  // Forgets job `id` (OK if it was not recorded). Thread-safe.
  Status Remove(const std::string& id) CHORUS_EXCLUDES(mu_);
  // A fresh job id ("job-N"), never one given out before by a serving process
  // of this journal: the counter is kept in the file (so a supervisor's
  // quarantine of an id never falls on a new job). RESOURCE_EXHAUSTED once
  // the counter reaches INT64_MAX (a journal edited by hand). Thread-safe.
  StatusOr<std::string> NewId() CHORUS_EXCLUDES(mu_);

 private:
  Status WriteLocked() CHORUS_REQUIRES(mu_);

  const std::string path_;
  Mutex mu_;
  std::map<std::string, training::JobSpec> jobs_ CHORUS_GUARDED_BY(mu_);
  int64_t next_id_ CHORUS_GUARDED_BY(mu_) = 1;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_TRAINING_JOB_JOURNAL_H_
