// The report a fatal signal writes before the process dies: which thread,
// what it was running (model, version, request ids: ScopedCrashContext), what
// registered hooks add (the interpreter and its Python stack), and a native
// backtrace. Everything the handler does is async-signal-safe.
#ifndef CHORUS_COMMON_CRASH_REPORT_H_
#define CHORUS_COMMON_CRASH_REPORT_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace chorus {

// Marks what the calling thread runs until destroyed ("model m version 1,
// requests a, b"), for the crash report. Nests: the report shows every level,
// outermost first. Copies (and truncates) into a thread-local buffer; cheap.
// Not copyable; destroy on the thread that made it.
class ScopedCrashContext {
 public:
  explicit ScopedCrashContext(std::string_view what);
  ~ScopedCrashContext();
  // Adds `more` to this level (no allocation: for hot paths that describe
  // their work piece by piece).
  void Append(std::string_view more);
  ScopedCrashContext(const ScopedCrashContext&) = delete;
  ScopedCrashContext& operator=(const ScopedCrashContext&) = delete;

 private:
  size_t restore_length_;
};

// Async-signal-safe writers for report lines: `text`, and `value` in decimal.
void WriteToFd(int fd, std::string_view text);
void WriteDecimalToFd(int fd, unsigned long long value);

// Writes the calling thread's crash context ("  running: ...") to `fd`, and
// what the hooks add. Async-signal-safe.
void WriteCrashContext(int fd);

// A function the report calls to add what it knows about the crashing thread;
// it must be async-signal-safe. At most 8; any thread; never removed.
using CrashReportHook = void (*)(int fd);
void AddCrashReportHook(CrashReportHook hook);

// Also writes the crashing thread's context text alone (one line) to `fd`
// when the process dies of a fatal signal or RecordCrashContext is called:
// how a supervisor learns which model was running. -1 turns it off.
void SetCrashRecordFd(int fd);
// Writes the calling thread's context line to the record fd, if one is set.
// Async-signal-safe.
void RecordCrashContext();

// What every thread of a child process runs, kept in memory shared with the
// parent that made the board, so the parent can still read it after the child
// died without a word (SIGKILL: the kernel's OOM killer, kill -9).
//
//   std::unique_ptr<CrashBoard> board = CrashBoard::Create();  // before fork
//   child:  board->Attach();  ...                              // before threads
//   parent: waitpid(...); board->RunningNow(); board->Clear();
class CrashBoard {
 public:
  // A board inherited by children forked later; nullptr if it cannot be
  // mapped (then nothing is kept: reports work as without one).
  static std::unique_ptr<CrashBoard> Create();
  ~CrashBoard();
  CrashBoard(const CrashBoard&) = delete;
  CrashBoard& operator=(const CrashBoard&) = delete;

  // In the child, before its threads start: from now on each thread keeps its
  // context (ScopedCrashContext) on the board. Children the child forks do not.
  void Attach();
  // The contexts of the threads that were running something, a line each, in
  // no particular order; "" if none. Read it once the child is gone.
  std::string RunningNow() const;
  // Empties the board for the next child.
  void Clear();

  struct Slot;  // a thread's context on the board (crash_report.cc)

 private:
  CrashBoard(Slot* slots, size_t bytes) : slots_(slots), bytes_(bytes) {}
  Slot* slots_;
  size_t bytes_;
};

// Installs the report for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT: it
// writes "<program>: fatal signal SIGSEGV (address 0x0) on thread <tid>", the
// thread's context, the hooks' additions and a native backtrace to `fd`, then
// dies of the same signal (so a supervisor sees which). Idempotent; call early
// in main, before threads start.
void InstallCrashHandler(const char* program, int fd = 2);

}  // namespace chorus

#endif  // CHORUS_COMMON_CRASH_REPORT_H_
