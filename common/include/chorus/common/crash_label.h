// What a thread is running, as crash reports name it and as the supervisor
// reads it back to quarantine what keeps crashing: a model version, or a rank
// of a training job. The one writer of that text (CrashLabel::text, which
// ScopedCrashContext records) and its one reader (CrashLabelsIn) live here,
// so the two agree by construction.
#ifndef CHORUS_COMMON_CRASH_LABEL_H_
#define CHORUS_COMMON_CRASH_LABEL_H_

#include <string>
#include <string_view>
#include <vector>

namespace chorus {

class CrashLabel {
 public:
  enum class Kind { kNone, kModel, kTrainingJob };

  // Labels nothing (a crash report says "?").
  CrashLabel() = default;
  // "model <name> version <version>".
  static CrashLabel Model(std::string name, std::string version);
  // "training job <id> rank <rank>".
  static CrashLabel TrainingJob(std::string id, int rank);

  Kind kind() const { return kind_; }
  // The model's name, or the job's id.
  const std::string& name() const { return name_; }
  // The model's version, or the job's rank.
  const std::string& instance() const { return instance_; }
  // The text a crash context starts with (made once: hot paths copy it).
  const std::string& text() const { return text_; }

  bool operator==(const CrashLabel& other) const {
    return kind_ == other.kind_ && name_ == other.name_ && instance_ == other.instance_;
  }

 private:
  CrashLabel(Kind kind, std::string name, std::string instance);

  Kind kind_ = Kind::kNone;
  std::string name_, instance_;
  std::string text_ = "?";
};

// Every label a crash record names (lines of crash contexts, levels joined by
// " > ", each level a label's text and then ", <what it did>"), each once, in
// the order first named.
std::vector<CrashLabel> CrashLabelsIn(std::string_view record);

}  // namespace chorus

#endif  // CHORUS_COMMON_CRASH_LABEL_H_
