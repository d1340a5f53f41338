#include "chorus/server/cell_control.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>
#include <vector>

namespace chorus {
namespace {

using Json = nlohmann::json;

constexpr const char* kServe = "serve";
constexpr const char* kQuarantine = "quarantine";
constexpr const char* kApply = "apply";
constexpr const char* kAnswer = "answer";
constexpr const char* kRequest = "request";
constexpr const char* kApplied = "applied";

std::string Line(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

Json ChangeJson(const ModelChange& change) {
  return {{"kind", change.kind == ModelChange::Kind::kLoad ? "load" : "unload"},
          {"model", change.model},
          {"override_file", change.override_file}};
}

// Throws (std::exception) for a malformed change; the override file is
// a plain name (no folders: it lies in the supervisor's changes folder).
ModelChange ChangeOf(const Json& json) {
  ModelChange change;
  const std::string kind = json.at("kind").get<std::string>();
  if (kind != "load" && kind != "unload") throw std::invalid_argument("kind");
  change.kind = kind == "load" ? ModelChange::Kind::kLoad : ModelChange::Kind::kUnload;
  change.model = json.at("model").get<std::string>();
  change.override_file = json.at("override_file").get<std::string>();
  const std::string& file = change.override_file;
  if (file.find('/') != std::string::npos || file == "." || file == "..") {
    throw std::invalid_argument("override_file");
  }
  return change;
}

Json StatusJson(const Status& status) {
  return {{"code", static_cast<int>(status.code())}, {"message", status.message()}};
}

Status StatusOf(const Json& json) {
  const int code = json.at("code").get<int>();
  if (code < 0 || code > static_cast<int>(StatusCode::kUnauthenticated)) {
    throw std::invalid_argument("code");
  }
  if (code == 0) return OkStatus();
  return Status(static_cast<StatusCode>(code), json.at("message").get<std::string>());
}

// Writes what it can of `data` to `fd`: a socket (no SIGPIPE) or a pipe.
ssize_t WriteSome(int fd, const char* data, size_t size) {
  const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
  if (n < 0 && errno == ENOTSOCK) return ::write(fd, data, size);
  return n;
}

// Writes `line` to `fd` whole, waiting for room up to kCellCommandWriteTimeout.
Status WriteLine(int fd, const std::string& line) {
  const auto give_up = std::chrono::steady_clock::now() + kCellCommandWriteTimeout;
  for (size_t written = 0; written < line.size();) {
    const ssize_t n = WriteSome(fd, line.data() + written, line.size() - written);
    if (n > 0) {
      written += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) continue;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      // Full: the reader is behind. Wait for room, a while, rather than drop
      // the message (or cut a long line in two).
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

}  // namespace

CellCommand CellCommand::Serve(int cell) {
  CellCommand command;
  command.kind = Kind::kServe;
  command.cell = cell;
  return command;
}

CellCommand CellCommand::Quarantine(std::string model, std::string why) {
  CellCommand command;
  command.kind = Kind::kQuarantine;
  command.model = std::move(model);
  command.why = std::move(why);
  return command;
}

CellCommand CellCommand::Apply(int64_t id, ModelChange change) {
  CellCommand command;
  command.kind = Kind::kApply;
  command.id = id;
  command.change = std::move(change);
  return command;
}

CellCommand CellCommand::Answer(int64_t id, Status status) {
  CellCommand command;
  command.kind = Kind::kAnswer;
  command.id = id;
  command.status = std::move(status);
  return command;
}

CellReport CellReport::Request(int64_t id, ModelChange change) {
  CellReport report;
  report.kind = Kind::kRequest;
  report.id = id;
  report.change = std::move(change);
  return report;
}

CellReport CellReport::Applied(int64_t id, Status status) {
  CellReport report;
  report.kind = Kind::kApplied;
  report.id = id;
  report.status = std::move(status);
  return report;
}

std::string EncodeCellCommand(const CellCommand& command) {
  switch (command.kind) {
    case CellCommand::Kind::kServe:
      return Line({{"command", kServe}, {"cell", command.cell}});
    case CellCommand::Kind::kQuarantine:
      return Line({{"command", kQuarantine}, {"model", command.model}, {"why", command.why}});
    case CellCommand::Kind::kApply:
      return Line(
          {{"command", kApply}, {"id", command.id}, {"change", ChangeJson(command.change)}});
    case CellCommand::Kind::kAnswer:
      return Line(
          {{"command", kAnswer}, {"id", command.id}, {"status", StatusJson(command.status)}});
  }
  return "\n";
}

StatusOr<CellCommand> DecodeCellCommand(std::string_view line) {
  const Json json = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("command") || !json["command"].is_string()) {
    return InvalidArgumentError("not a supervisor command: " + std::string(line.substr(0, 200)));
  }
  const std::string kind = json["command"].get<std::string>();
  CellCommand command;
  try {
    if (kind == kServe) {
      command.kind = CellCommand::Kind::kServe;
      command.cell = json.at("cell").get<int>();
    } else if (kind == kQuarantine) {
      command.kind = CellCommand::Kind::kQuarantine;
      command.model = json.at("model").get<std::string>();
      command.why = json.at("why").get<std::string>();
    } else if (kind == kApply) {
      command.kind = CellCommand::Kind::kApply;
      command.id = json.at("id").get<int64_t>();
      command.change = ChangeOf(json.at("change"));
    } else if (kind == kAnswer) {
      command.kind = CellCommand::Kind::kAnswer;
      command.id = json.at("id").get<int64_t>();
      command.status = StatusOf(json.at("status"));
    } else {
      return InvalidArgumentError("unknown supervisor command \"" + kind + "\"");
    }
  } catch (const std::exception&) {
    return InvalidArgumentError("malformed supervisor command \"" + kind + "\"");
  }
  return command;
}

std::string EncodeCellReport(const CellReport& report) {
  if (report.kind == CellReport::Kind::kRequest) {
    return Line({{"report", kRequest}, {"id", report.id}, {"change", ChangeJson(report.change)}});
  }
  return Line({{"report", kApplied}, {"id", report.id}, {"status", StatusJson(report.status)}});
}

StatusOr<CellReport> DecodeCellReport(std::string_view line) {
  const Json json = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("report") || !json["report"].is_string()) {
    return InvalidArgumentError("not a serving process's report: " +
                                std::string(line.substr(0, 200)));
  }
  const std::string kind = json["report"].get<std::string>();
  CellReport report;
  try {
    report.id = json.at("id").get<int64_t>();
    if (kind == kRequest) {
      report.kind = CellReport::Kind::kRequest;
      report.change = ChangeOf(json.at("change"));
    } else if (kind == kApplied) {
      report.kind = CellReport::Kind::kApplied;
      report.status = StatusOf(json.at("status"));
    } else {
      return InvalidArgumentError("unknown serving process report \"" + kind + "\"");
    }
  } catch (const std::exception&) {
    return InvalidArgumentError("malformed serving process report \"" + kind + "\"");
  }
  return report;
}

std::string EncodeChangeOverride(const ChangeOverride& override) {
  Json files = Json::object();
  for (const auto& [path, contents] : override.files) {
    files[path] = Json::binary(std::vector<uint8_t>(contents.begin(), contents.end()));
  }
  const std::vector<uint8_t> bytes =
      Json::to_cbor(Json{{"config", override.config_json}, {"files", std::move(files)}});
  return std::string(bytes.begin(), bytes.end());
}

StatusOr<ChangeOverride> DecodeChangeOverride(std::string_view bytes) {
  const Json json = Json::from_cbor(bytes.begin(), bytes.end(), /*strict=*/true,
                                    /*allow_exceptions=*/false);
  ChangeOverride override;
  try {
    override.config_json = json.at("config").get<std::string>();
    for (const auto& [path, contents] : json.at("files").items()) {
      const Json::binary_t& data = contents.get_binary();
      override.files[path] = std::string(data.begin(), data.end());
    }
  } catch (const std::exception& error) {
    return InvalidArgumentError(std::string("not a load's override: ") + error.what());
  }
  return override;
}

std::string EncodeServingRun(const ServingRun& run) {
  Json json = {{"restarts", run.restarts},
               {"last_exit", run.last_exit},
               {"quarantined", run.quarantined},
               {"quarantined_jobs", run.quarantined_jobs},
               {"cell", run.cell},
               {"spare", run.spare},
               {"model_changes", Json::array()},
               {"changes_dir", run.changes_dir}};
  for (const ModelChange& change : run.model_changes) {
    json["model_changes"].push_back(ChangeJson(change));
  }
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

StatusOr<ServingRun> DecodeServingRun(std::string_view text) {
  const Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  ServingRun run;
  try {
    run.restarts = json.at("restarts").get<int>();
    run.last_exit = json.at("last_exit").get<std::string>();
    run.quarantined = json.at("quarantined").get<std::map<std::string, std::string>>();
    run.quarantined_jobs = json.at("quarantined_jobs").get<std::map<std::string, std::string>>();
    run.cell = json.at("cell").get<int>();
    run.spare = json.at("spare").get<bool>();
    for (const Json& change : json.at("model_changes"))
      run.model_changes.push_back(ChangeOf(change));
    run.changes_dir = json.at("changes_dir").get<std::string>();
  } catch (const std::exception& error) {
    return InvalidArgumentError(std::string("not a serving run: ") + error.what());
  }
  return run;
}

Status WriteCellCommand(int fd, const CellCommand& command) {
  return WriteLine(fd, EncodeCellCommand(command));
}

Status WriteCellReport(int fd, const CellReport& report) {
  return WriteLine(fd, EncodeCellReport(report));
}

bool FillLines(int fd, std::string* buffer) {
  char chunk[4096];
  while (true) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n > 0) {
      buffer->append(chunk, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof(chunk)) return true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    // 0: the writer is gone; EAGAIN: nothing more now.
    return n < 0 && errno == EAGAIN;
  }
}

}  // namespace chorus
