// What chorus-server's supervisor tells a serving process it started (a cell,
// or the warm spare) on the process's control pipe: a JSON object per line;
// and how it asks its preloaded process to fork one (a ServingRun as JSON).
// One home for the messages, their encoding and their decoding.
#ifndef CHORUS_SERVER_CELL_CONTROL_H_
#define CHORUS_SERVER_CELL_CONTROL_H_

#include <chrono>
#include <string>
#include <string_view>

#include "chorus/common/status.h"
#include "chorus/server/supervisor.h"

namespace chorus {

struct CellCommand {
  enum class Kind {
    kServe,       // the spare: start accepting as cell `cell`
    kQuarantine,  // stop serving `model` (`why`): it crashed cells repeatedly
  };
  Kind kind = Kind::kServe;
  int cell = 0;
  std::string model;
  std::string why;
};

// One line, '\n' included.
std::string EncodeCellCommand(const CellCommand& command);
// INVALID_ARGUMENT naming what is wrong with `line` (without its '\n').
StatusOr<CellCommand> DecodeCellCommand(std::string_view line);

// A serving process's run as one JSON text (control_fd left out: fds travel
// beside it), and back; INVALID_ARGUMENT naming what is wrong.
std::string EncodeServingRun(const ServingRun& run);
StatusOr<ServingRun> DecodeServingRun(std::string_view text);

// How long WriteCellCommand waits for room in a full pipe.
inline constexpr std::chrono::milliseconds kCellCommandWriteTimeout{5000};

// Writes `command` to `fd` whole (a pipe: one write up to PIPE_BUF is atomic,
// longer ones are written on); a full non-blocking pipe is waited on, up to
// kCellCommandWriteTimeout. Errors (UNAVAILABLE): the reader is gone, or
// did not read for that long.
Status WriteCellCommand(int fd, const CellCommand& command);

// Reads the commands arriving on a pipe, which may split or join lines.
class CellCommandReader {
 public:
  explicit CellCommandReader(int fd) : fd_(fd) {}
  // Reads what the pipe holds now (the fd is readable) and returns the
  // complete lines' commands through `each`. False once the writer is gone.
  template <typename Each>
  bool ReadAvailable(Each each) {
    const bool open = Fill();
    for (size_t end; (end = buffer_.find('\n')) != std::string::npos;) {
      StatusOr<CellCommand> command = DecodeCellCommand(std::string_view(buffer_).substr(0, end));
      buffer_.erase(0, end + 1);
      each(command);
    }
    return open;
  }

 private:
  bool Fill();
  int fd_;
  std::string buffer_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_CELL_CONTROL_H_
