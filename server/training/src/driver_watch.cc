#include "chorus/server/training/driver_watch.h"

#include <utility>

namespace chorus {

DriverWatch::~DriverWatch() { Stop(); }

void DriverWatch::Start() {
  MutexLock lock(&mu_);
  if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { Run(); });
}

void DriverWatch::Stop() {
  std::thread thread;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    thread.swap(thread_);
  }
  changed_.SignalAll();
  if (thread.joinable()) thread.join();
}

void DriverWatch::Run() {
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (stopping_) return;
      changed_.WaitUntil(&mu_, Clock::now() + std::chrono::seconds(1));
      if (stopping_) return;
    }
    CheckDrivers();
  }
}

void DriverWatch::CheckDrivers() {
  const std::map<std::string, std::shared_ptr<JobEntry>> jobs = jobs_->List();
  for (auto it = heard_.begin(); it != heard_.end();) {
    it = jobs.count(it->first) > 0 ? std::next(it) : heard_.erase(it);
  }
  for (const auto& [id, entry] : jobs) {
    if (entry->driver.empty() || entry->state() == JobState::kFailed) continue;
    // From when it is first watched.
    Heard& heard = heard_.try_emplace(id, Heard{Clock::now(), false}).first->second;
    const std::string gone = AskDriver(id, *entry, heard);
    if (gone.empty()) continue;
    heard_.erase(id);
    fail_(id, entry, UnavailableError("its driver " + entry->driver + " is lost: " + gone));
  }
}

std::string DriverWatch::AskDriver(const std::string& id, const JobEntry& entry, Heard& heard) {
  auto& stub = drivers_[entry.driver];
  if (!stub) {
    stub = training::TrainingService::NewStub(
        grpc::CreateChannel(entry.driver, grpc::InsecureChannelCredentials()));
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (!authorizer_->token().empty()) {
    context.AddMetadata("authorization", "Bearer " + authorizer_->token());
  }
  training::GetStatsRequest request;
  request.set_job_id(id);
  training::JobStats stats;
  const grpc::Status answer = stub->GetStats(&context, request, &stats);
  const auto now = Clock::now();
  const bool failed_there = JobStateByName(stats.state()) == JobState::kFailed;
  if (answer.ok() && !failed_there) {
    heard.last = now;
    heard.confirmed = true;
    return "";
  }
  if (answer.ok()) return "it failed there: " + stats.reason();
  // (Before the driver first knew it, the job may not be published there yet.)
  if (answer.error_code() == grpc::StatusCode::NOT_FOUND && heard.confirmed) {
    return "it no longer knows the job (restarted, or the job was deleted)";
  }
  const std::chrono::milliseconds timeout = entry.job->options().collective_timeout;
  if (now - heard.last > timeout) {
    return "no answer for " + std::to_string(timeout.count()) + " ms: " + answer.error_message();
  }
  return "";
}

}  // namespace chorus
