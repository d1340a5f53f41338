#include "chorus/common/crash_label.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace chorus {
namespace {

constexpr std::string_view kModelPrefix = "model ";
constexpr std::string_view kModelInfix = " version ";
constexpr std::string_view kJobPrefix = "training job ";
constexpr std::string_view kJobInfix = " rank ";
constexpr std::string_view kLevelSeparator = " > ";

// The label one level of a context starts with: `prefix` <name> `infix`
// <instance>, up to the first ", " (names may hold spaces; instances do not).
bool ParseLevel(std::string_view level, std::string_view prefix, std::string_view infix,
                std::string* name, std::string* instance) {
  if (level.substr(0, prefix.size()) != prefix) return false;
  level.remove_prefix(prefix.size());
  level = level.substr(0, level.find(", "));
  const size_t split = level.rfind(infix);
  if (split == std::string_view::npos || split == 0) return false;
  *name = std::string(level.substr(0, split));
  *instance = std::string(level.substr(split + infix.size()));
  return !instance->empty() && instance->find(' ') == std::string::npos;
}

std::optional<CrashLabel> ParseLabel(std::string_view level) {
  std::string name, instance;
  if (ParseLevel(level, kModelPrefix, kModelInfix, &name, &instance)) {
    return CrashLabel::Model(std::move(name), std::move(instance));
  }
  if (ParseLevel(level, kJobPrefix, kJobInfix, &name, &instance)) {
    const bool digits = instance.find_first_not_of("0123456789") == std::string::npos;
    if (digits && instance.size() < 9) return CrashLabel::TrainingJob(name, std::stoi(instance));
  }
  return std::nullopt;
}

}  // namespace

CrashLabel::CrashLabel(Kind kind, std::string name, std::string instance)
    : kind_(kind), name_(std::move(name)), instance_(std::move(instance)) {
  text_ = kind_ == Kind::kModel
              ? std::string(kModelPrefix) + name_ + std::string(kModelInfix) + instance_
              : std::string(kJobPrefix) + name_ + std::string(kJobInfix) + instance_;
}

CrashLabel CrashLabel::Model(std::string name, std::string version) {
  return CrashLabel(Kind::kModel, std::move(name), std::move(version));
}

CrashLabel CrashLabel::TrainingJob(std::string id, int rank) {
  return CrashLabel(Kind::kTrainingJob, std::move(id), std::to_string(rank));
}

std::vector<CrashLabel> CrashLabelsIn(std::string_view record) {
  std::vector<CrashLabel> labels;
  auto add = [&](std::string_view level) {
    std::optional<CrashLabel> label = ParseLabel(level);
    if (label && std::find(labels.begin(), labels.end(), *label) == labels.end()) {
      labels.push_back(std::move(*label));
    }
  };
  while (!record.empty()) {
    std::string_view line = record.substr(0, record.find('\n'));
    record.remove_prefix(std::min(record.size(), line.size() + 1));
    for (size_t split; (split = line.find(kLevelSeparator)) != std::string_view::npos;) {
      add(line.substr(0, split));
      line.remove_prefix(split + kLevelSeparator.size());
    }
    add(line);
  }
  return labels;
}

}  // namespace chorus
