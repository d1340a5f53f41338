#include "chorus/server/cell_control.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

namespace chorus {
namespace {

constexpr const char* kServe = "serve";
constexpr const char* kQuarantine = "quarantine";

}  // namespace

std::string EncodeCellCommand(const CellCommand& command) {
  nlohmann::json json;
  if (command.kind == CellCommand::Kind::kServe) {
    json = {{"command", kServe}, {"cell", command.cell}};
  } else {
    json = {{"command", kQuarantine}, {"model", command.model}, {"why", command.why}};
  }
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

StatusOr<CellCommand> DecodeCellCommand(std::string_view line) {
  const nlohmann::json json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("command") || !json["command"].is_string()) {
    return InvalidArgumentError("not a supervisor command: " + std::string(line.substr(0, 200)));
  }
  const std::string kind = json["command"].get<std::string>();
  CellCommand command;
  if (kind == kServe && json.contains("cell") && json["cell"].is_number_integer()) {
    command.kind = CellCommand::Kind::kServe;
    command.cell = json["cell"].get<int>();
    return command;
  }
  if (kind == kQuarantine && json.contains("model") && json["model"].is_string() &&
      json.contains("why") && json["why"].is_string()) {
    command.kind = CellCommand::Kind::kQuarantine;
    command.model = json["model"].get<std::string>();
    command.why = json["why"].get<std::string>();
    return command;
  }
  return InvalidArgumentError("malformed supervisor command \"" + kind + "\"");
}

std::string EncodeServingRun(const ServingRun& run) {
  const nlohmann::json json = {{"restarts", run.restarts},
                               {"last_exit", run.last_exit},
                               {"quarantined", run.quarantined},
                               {"quarantined_jobs", run.quarantined_jobs},
                               {"cell", run.cell},
                               {"spare", run.spare}};
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

StatusOr<ServingRun> DecodeServingRun(std::string_view text) {
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ServingRun run;
  try {
    run.restarts = json.at("restarts").get<int>();
    run.last_exit = json.at("last_exit").get<std::string>();
    run.quarantined = json.at("quarantined").get<std::map<std::string, std::string>>();
    run.quarantined_jobs = json.at("quarantined_jobs").get<std::map<std::string, std::string>>();
    run.cell = json.at("cell").get<int>();
    run.spare = json.at("spare").get<bool>();
  } catch (const nlohmann::json::exception& error) {
    return InvalidArgumentError(std::string("not a serving run: ") + error.what());
  }
  return run;
}

Status WriteCellCommand(int fd, const CellCommand& command) {
  const std::string line = EncodeCellCommand(command);
  const auto give_up = std::chrono::steady_clock::now() + kCellCommandWriteTimeout;
  for (size_t written = 0; written < line.size();) {
    const ssize_t n = ::write(fd, line.data() + written, line.size() - written);
    if (n > 0) {
      written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // The pipe is full: the process reads it behind. Wait for room, a
      // while, rather than drop the command (or cut a long line in two).
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          give_up - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        return UnavailableError("control pipe: full for " +
                                std::to_string(kCellCommandWriteTimeout.count()) +
                                " ms (the process does not read it)");
      }
      pollfd room{fd, POLLOUT, 0};
      ::poll(&room, 1, static_cast<int>(left.count()));
      continue;
    }
    return UnavailableError(std::string("control pipe: ") + std::strerror(errno));
  }
  return OkStatus();
}

bool CellCommandReader::Fill() {
  char chunk[4096];
  while (true) {
    const ssize_t n = ::read(fd_, chunk, sizeof(chunk));
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof(chunk)) return true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    // 0: the writer is gone; EAGAIN: nothing more now.
    return n < 0 && errno == EAGAIN;
  }
}

}  // namespace chorus
