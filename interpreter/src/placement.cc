#include "chorus/interpreter/placement.h"

#include <algorithm>
#include <utility>

namespace chorus {

InterpreterLease::InterpreterLease(InterpreterLease&& other) noexcept
    : placement_(std::exchange(other.placement_, nullptr)),
      interpreters_(std::move(other.interpreters_)),
      exclusive_(other.exclusive_),
      owner_(std::move(other.owner_)) {}

InterpreterLease& InterpreterLease::operator=(InterpreterLease&& other) noexcept {
  if (this != &other) {
    Release();
    placement_ = std::exchange(other.placement_, nullptr);
    interpreters_ = std::move(other.interpreters_);
    exclusive_ = other.exclusive_;
    owner_ = std::move(other.owner_);
  }
  return *this;
}

void InterpreterLease::Release() {
  if (InterpreterPlacement* placement = std::exchange(placement_, nullptr)) {
    placement->Give(*this);
  }
}

std::vector<int> InterpreterPlacement::FreeLocked() const {
  std::vector<int> free;
  for (int i = 0; i < manager_->size(); ++i) {
    if (exclusive_.count(i) == 0 && shared_.count(i) == 0) free.push_back(i);
  }
  return free;
}

std::string InterpreterPlacement::DescribeHeldLocked() const {
  std::string held;
  auto add = [&](int index, const std::string& owner) {
    held += (held.empty() ? "" : ", ") + std::to_string(index) + ": " + owner;
  };
  for (const auto& [index, owner] : exclusive_) add(index, owner);
  for (const auto& [index, owners] : shared_) {
    for (const std::string& owner : owners) add(index, owner);
  }
  return held;
}

Status InterpreterPlacement::CheckExclusive(int count) const {
  MutexLock lock(&mu_);
  const size_t free = FreeLocked().size();
  if (count <= static_cast<int>(free)) return OkStatus();
  const std::string held = DescribeHeldLocked();
  return InvalidArgumentError(std::to_string(count) + " ranks need as many interpreters; the " +
                              "server has " + std::to_string(manager_->size()) + " and " +
                              std::to_string(free) + " are free" +
                              (held.empty() ? "" : " (interpreter " + held + ")"));
}

StatusOr<InterpreterLease> InterpreterPlacement::HoldExclusive(int count,
                                                               const std::string& owner) {
  CHORUS_RETURN_IF_ERROR(CheckExclusive(count));
  MutexLock lock(&mu_);
  std::vector<int> free = FreeLocked();
  if (count > static_cast<int>(free.size())) {  // taken since the check
    return InvalidArgumentError("interpreters were placed meanwhile; retry");
  }
  free.resize(count);
  for (int i : free) {
    exclusive_[i] = owner;
    // Model calls move off them while any interpreter is left to serve.
    manager_->SetReserved(i, true);
  }
  return InterpreterLease(this, std::move(free), /*exclusive=*/true, owner);
}

StatusOr<InterpreterLease> InterpreterPlacement::PinShared(int count, const std::string& owner) {
  MutexLock lock(&mu_);
  std::vector<int> candidates;
  for (int i = manager_->size() - 1; i >= 0; --i) {
    if (exclusive_.count(i) == 0) candidates.push_back(i);
  }
  if (candidates.empty()) {
    return FailedPreconditionError("every interpreter runs a training job (" +
                                   DescribeHeldLocked() + "): none is left for " + owner);
  }
  // The least pinned first; among equals the highest index (stable sort).
  std::map<int, size_t> pins;
  for (int i : candidates) pins[i] = shared_.count(i) ? shared_.at(i).size() : 0;
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&pins](int a, int b) { return pins[a] < pins[b]; });
  candidates.resize(std::min<size_t>(candidates.size(), std::max(count, 1)));
  for (int i : candidates) shared_[i].push_back(owner);
  return InterpreterLease(this, std::move(candidates), /*exclusive=*/false, owner);
}

std::string InterpreterPlacement::OwnersOf(int index) const {
  MutexLock lock(&mu_);
  if (auto it = exclusive_.find(index); it != exclusive_.end()) return it->second;
  std::string owners;
  if (auto it = shared_.find(index); it != shared_.end()) {
    for (const std::string& owner : it->second) owners += (owners.empty() ? "" : ", ") + owner;
  }
  return owners;
}

void InterpreterPlacement::Give(const InterpreterLease& lease) {
  MutexLock lock(&mu_);
  for (int i : lease.interpreters_) {
    if (lease.exclusive_) {
      exclusive_.erase(i);
      manager_->SetReserved(i, false);
      continue;
    }
    auto it = shared_.find(i);
    if (it == shared_.end()) continue;
    std::vector<std::string>& owners = it->second;
    if (auto owner = std::find(owners.begin(), owners.end(), lease.owner_); owner != owners.end()) {
      owners.erase(owner);
    }
    if (owners.empty()) shared_.erase(it);
  }
}

}  // namespace chorus
