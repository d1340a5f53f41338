// What chorus-server's supervisor and a serving process it started (a cell,
// or the warm spare) tell each other on the process's control socket: a JSON
// object per line each way (CellCommand to the process, CellReport back); a
// load's override in a file beside them (EncodeChangeOverride); and how the
// supervisor asks its preloaded process to fork one (a ServingRun as JSON).
// One home for the messages, their encoding and their decoding.
//
// A repository call's load or unload in a process of several:
//   process  --kRequest(id, change)-->  supervisor   (the override in a file)
//   supervisor --kApply(n, change)-->   every process, the asker too
//   each process --kApplied(n, status)--> supervisor (after the changes before n)
//   supervisor --kAnswer(id, status)--> the asker   (once all answered or died)
#ifndef CHORUS_SERVER_CELL_CONTROL_H_
#define CHORUS_SERVER_CELL_CONTROL_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "chorus/common/status.h"
#include "chorus/server/supervisor.h"

namespace chorus {

// The supervisor to a serving process.
struct CellCommand {
  enum class Kind {
    kServe,       // the spare: start accepting as cell `cell`
    kQuarantine,  // stop serving `model` (`why`): it crashed cells repeatedly
    kApply,       // carry out `change` (the supervisor's change `id`), report kApplied
    kAnswer,      // every process carried out this process's request `id`: `status`
  };
  Kind kind = Kind::kServe;
  int cell = 0;
  std::string model;
  std::string why;
  int64_t id = 0;
  ModelChange change;  // kApply's
  Status status;       // kAnswer's: OK, or the first process's error, naming it

  static CellCommand Serve(int cell);
  static CellCommand Quarantine(std::string model, std::string why);
  static CellCommand Apply(int64_t id, ModelChange change);
  static CellCommand Answer(int64_t id, Status status);
};

// A serving process to the supervisor.
struct CellReport {
  enum class Kind {
    kRequest,  // have every serving process carry out `change`; answer request `id`
    kApplied,  // this process carried out the supervisor's change `id`: `status`
  };
  Kind kind = Kind::kRequest;
  int64_t id = 0;
  ModelChange change;  // kRequest's
  Status status;       // kApplied's

  static CellReport Request(int64_t id, ModelChange change);
  static CellReport Applied(int64_t id, Status status);
};

// One line, '\n' included.
std::string EncodeCellCommand(const CellCommand& command);
std::string EncodeCellReport(const CellReport& report);
// INVALID_ARGUMENT naming what is wrong with `line` (without its '\n').
StatusOr<CellCommand> DecodeCellCommand(std::string_view line);
StatusOr<CellReport> DecodeCellReport(std::string_view line);

// A load's config and files (Triton's load parameters), as every serving
// process reads them from ModelChange::override_file: CBOR, the files' bytes
// as they are.
struct ChangeOverride {
  std::string config_json;                   // "" for the folder's
  std::map<std::string, std::string> files;  // path in the model's folder -> contents
};
std::string EncodeChangeOverride(const ChangeOverride& override);
// INVALID_ARGUMENT if `bytes` is not an encoded override.
StatusOr<ChangeOverride> DecodeChangeOverride(std::string_view bytes);

// A serving process's run as one JSON text (control_fd left out: fds travel
// beside it), and back; INVALID_ARGUMENT naming what is wrong.
std::string EncodeServingRun(const ServingRun& run);
StatusOr<ServingRun> DecodeServingRun(std::string_view text);

// How long WriteCellCommand and WriteCellReport wait for room in a full pipe.
inline constexpr std::chrono::milliseconds kCellCommandWriteTimeout{5000};

// Writes `command` (`report`) to `fd` whole (a pipe or socket; a pipe's
// write up to PIPE_BUF is atomic, longer ones are written on); a full
// non-blocking fd is waited on, up to kCellCommandWriteTimeout. Errors
// (UNAVAILABLE): the reader is gone, or did not read for that long. Writers
// on several threads serialize their calls themselves.
Status WriteCellCommand(int fd, const CellCommand& command);
Status WriteCellReport(int fd, const CellReport& report);

// Appends what `fd` holds now to `buffer`; false once the writer is gone.
bool FillLines(int fd, std::string* buffer);

// Reads the messages arriving on a pipe or socket, which may split or join
// lines, decoding each line with `Decode`.
template <typename Message, StatusOr<Message> (*Decode)(std::string_view)>
class CellMessageReader {
 public:
  explicit CellMessageReader(int fd = -1) : fd_(fd) {}
  // Reads what the fd holds now (it is readable, or non-blocking) and returns
  // the complete lines' messages through `each`. False once the writer is gone.
  template <typename Each>
  bool ReadAvailable(Each each) {
    const bool open = FillLines(fd_, &buffer_);
    for (size_t end; (end = buffer_.find('\n')) != std::string::npos;) {
      StatusOr<Message> message = Decode(std::string_view(buffer_).substr(0, end));
      buffer_.erase(0, end + 1);
      each(message);
    }
    return open;
  }

 private:
  int fd_;
  std::string buffer_;
};

using CellCommandReader = CellMessageReader<CellCommand, DecodeCellCommand>;
using CellReportReader = CellMessageReader<CellReport, DecodeCellReport>;

}  // namespace chorus

#endif  // CHORUS_SERVER_CELL_CONTROL_H_
