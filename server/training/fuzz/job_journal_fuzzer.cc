// libFuzzer target: arbitrary bytes as the job journal a serving process
// reads when it starts (a file a crash or a person may have left in any
// state). Opening must return an error or the jobs, never crash, hang or
// leak; after a good open, a new id is one no recorded job has, and a job
// put under it is there when the journal is read again.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "chorus/common/file_util.h"
#include "chorus/server/training/job_journal.h"

namespace {

// One file per fuzzing process, rewritten for each input.
const std::string& JournalPath() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir ? dir : "/tmp") + "/chorus-fuzz-jobs-" + std::to_string(getpid()) +
           ".json";
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = JournalPath();
  if (!chorus::WriteFileAtomically(path, std::string(reinterpret_cast<const char*>(data), size))
           .ok()) {
    __builtin_trap();
  }
  chorus::JobJournal journal(path);
  chorus::StatusOr<std::vector<chorus::JobJournal::Entry>> entries = journal.Open();
  if (!entries.ok()) return 0;
  chorus::StatusOr<std::string> id = journal.NewId();
  if (!id.ok()) return 0;  // an id past the counter's range is refused
  for (const auto& entry : *entries) {
    if (entry.id == *id) __builtin_trap();
  }
  chorus::training::JobSpec spec;
  spec.set_name("fuzz");
  if (!journal.Put(*id, spec).ok()) __builtin_trap();
  chorus::JobJournal reread(path);
  chorus::StatusOr<std::vector<chorus::JobJournal::Entry>> again = reread.Open();
  if (!again.ok() || again->size() != entries->size() + 1) __builtin_trap();
  return 0;
}
