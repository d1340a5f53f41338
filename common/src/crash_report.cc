#include "chorus/common/crash_report.h"

#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace chorus {
namespace {

constexpr size_t kContextBytes = 1024;
constexpr int kMaxHooks = 8;
// Threads with a context at once that a board keeps; more keep theirs only
// in their own memory.
constexpr size_t kBoardSlots = 256;

// A thread's context, levels separated by " > ". `length` is published
// after the bytes, so a handler interrupting a write sees a consistent prefix.
struct ThreadContext {
  char text[kContextBytes];
  size_t length = 0;
};

}  // namespace

struct CrashBoard::Slot {
  std::atomic<pid_t> owner;  // the thread's id; 0 when free
  ThreadContext context;
};

namespace {

// The board this process keeps its threads' contexts on, if any.
std::atomic<CrashBoard::Slot*> g_board{nullptr};

thread_local ThreadContext tls_own_context;
// This thread's context: a slot on the board or tls_own_context; null until
// the thread first describes what it runs (a signal handler reads it as empty).
thread_local ThreadContext* tls_context = nullptr;

// Gives the thread's slot back when the thread ends.
struct SlotRelease {
  CrashBoard::Slot* slot = nullptr;
  ~SlotRelease() {
    if (slot == nullptr) return;
    tls_context = &tls_own_context;
    slot->context.length = 0;
    slot->owner.store(0, std::memory_order_release);
  }
};
thread_local SlotRelease tls_slot_release;

ThreadContext& Context() {
  if (tls_context != nullptr) return *tls_context;
  tls_context = &tls_own_context;
  CrashBoard::Slot* slots = g_board.load(std::memory_order_acquire);
  if (slots == nullptr) return *tls_context;
  const pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
  for (size_t i = 0; i < kBoardSlots; ++i) {
    pid_t free = 0;
    if (slots[i].owner.compare_exchange_strong(free, tid, std::memory_order_acq_rel)) {
      slots[i].context.length = 0;
      tls_slot_release.slot = &slots[i];
      tls_context = &slots[i].context;
      break;
    }
  }
  return *tls_context;
}

// A child forked by a process with a board must not write on its parent's
// slots: it keeps its contexts to itself.
void DetachAfterFork() {
  g_board.store(nullptr, std::memory_order_release);
  if (tls_slot_release.slot != nullptr) {
    tls_own_context = *tls_context;
    tls_slot_release.slot = nullptr;
    tls_context = &tls_own_context;
  }
}

std::atomic<CrashReportHook> g_hooks[kMaxHooks];
std::atomic<int> g_hook_count{0};
const char* g_program = "chorus";
int g_fd = 2;
std::atomic<int> g_record_fd{-1};
std::atomic<bool> g_installed{false};
std::atomic<bool> g_reporting{false};

void Write(int fd, const char* text, size_t length) { WriteToFd(fd, {text, length}); }
void Write(int fd, const char* text) { Write(fd, text, std::strlen(text)); }

// `value` in `base` (10 or 16), no allocation.
void WriteNumber(int fd, unsigned long long value, int base) {
  char digits[32];
  int n = 0;
  do {
    digits[n++] = "0123456789abcdef"[value % base];
    value /= base;
  } while (value > 0);
  char out[34];
  int k = 0;
  if (base == 16) {
    out[k++] = '0';
    out[k++] = 'x';
  }
  while (n > 0) out[k++] = digits[--n];
  Write(fd, out, static_cast<size_t>(k));
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    default:
      return "signal";
  }
}

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

void OnFatalSignal(int sig, siginfo_t* info, void*) {
  // A second fault while reporting (or on another thread) goes straight to
  // the default action.
  if (!g_reporting.exchange(true)) {
    const int fd = g_fd;
    Write(fd, "\n");
    Write(fd, g_program);
    Write(fd, ": fatal signal ");
    Write(fd, SignalName(sig));
    if (sig != SIGABRT && info != nullptr) {
      Write(fd, " (address ");
      WriteNumber(fd, reinterpret_cast<uintptr_t>(info->si_addr), 16);
      Write(fd, ")");
    }
    Write(fd, " on thread ");
    WriteNumber(fd, static_cast<unsigned long long>(::syscall(SYS_gettid)), 10);
    Write(fd, "\n");
    WriteCrashContext(fd);
    RecordCrashContext();
    Write(fd, "  native stack:\n");
    void* frames[64];
    const int count = ::backtrace(frames, 64);
    ::backtrace_symbols_fd(frames, count, fd);
    Write(fd, "\n");
  }
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  ::sigaction(sig, &fallback, nullptr);
  ::raise(sig);
}

}  // namespace

ScopedCrashContext::ScopedCrashContext(std::string_view what) : restore_length_(Context().length) {
  if (restore_length_ > 0) Append(" > ");
  Append(what);
}

void ScopedCrashContext::Append(std::string_view more) {
  ThreadContext& context = Context();
  const size_t n = std::min(more.size(), kContextBytes - 1 - context.length);
  std::memcpy(context.text + context.length, more.data(), n);
  // The bytes first, then the length: a handler never reads unwritten bytes.
  std::atomic_signal_fence(std::memory_order_release);
  context.length += n;
}

void WriteToFd(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n <= 0) return;
    text.remove_prefix(static_cast<size_t>(n));
  }
}

void WriteDecimalToFd(int fd, unsigned long long value) { WriteNumber(fd, value, 10); }

ScopedCrashContext::~ScopedCrashContext() { Context().length = restore_length_; }

void WriteCrashContext(int fd) {
  const ThreadContext* context = tls_context;
  const size_t length = context == nullptr ? 0 : context->length;
  std::atomic_signal_fence(std::memory_order_acquire);
  Write(fd, "  running: ");
  if (length == 0) {
    Write(fd, "nothing chorus knows of (not a model call)");
  } else {
    Write(fd, context->text, length);
  }
  Write(fd, "\n");
  const int hooks = std::min(g_hook_count.load(std::memory_order_acquire), kMaxHooks);
  for (int i = 0; i < hooks; ++i) {
    if (CrashReportHook hook = g_hooks[i].load(std::memory_order_acquire)) hook(fd);
  }
}

void SetCrashRecordFd(int fd) { g_record_fd.store(fd, std::memory_order_release); }

void RecordCrashContext() {
  const int fd = g_record_fd.load(std::memory_order_acquire);
  if (fd < 0) return;
  const ThreadContext* context = tls_context;
  const size_t length = context == nullptr ? 0 : context->length;
  std::atomic_signal_fence(std::memory_order_acquire);
  if (length > 0) Write(fd, context->text, length);
  Write(fd, "\n");
}

void AddCrashReportHook(CrashReportHook hook) {
  const int i = g_hook_count.fetch_add(1);
  if (i < kMaxHooks) g_hooks[i].store(hook, std::memory_order_release);
}

std::unique_ptr<CrashBoard> CrashBoard::Create() {
  const size_t bytes = kBoardSlots * sizeof(Slot);
  void* memory = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return nullptr;
  // Zeroed pages: every slot free and empty (atomic<pid_t> is lock-free, so
  // zero bytes are a valid 0).
  static_assert(std::atomic<pid_t>::is_always_lock_free);
  return std::unique_ptr<CrashBoard>(new CrashBoard(static_cast<Slot*>(memory), bytes));
}

CrashBoard::~CrashBoard() { ::munmap(slots_, bytes_); }

void CrashBoard::Attach() {
  static const bool registered = [] {
    return ::pthread_atfork(nullptr, nullptr, &DetachAfterFork) == 0;
  }();
  (void)registered;
  g_board.store(slots_, std::memory_order_release);
  // The calling thread may have described its work before (a forked child
  // inherits its parent's thread-local context): that goes on the board too.
  if (tls_context == &tls_own_context) {
    const ThreadContext before = tls_own_context;
    tls_context = nullptr;
    Context() = before;
  }
}

std::string CrashBoard::RunningNow() const {
  std::string lines;
  for (size_t i = 0; i < kBoardSlots; ++i) {
    const ThreadContext& context = slots_[i].context;
    const size_t length = std::min(context.length, kContextBytes);
    if (length == 0) continue;
    lines.append(context.text, length);
    lines += '\n';
  }
  return lines;
}

void CrashBoard::Clear() { std::memset(static_cast<void*>(slots_), 0, bytes_); }

void InstallCrashHandler(const char* program, int fd) {
  if (g_installed.exchange(true)) return;
  g_program = program;
  g_fd = fd;
  // backtrace() loads libgcc on its first call, which is not signal-safe:
  // make that call now.
  void* warm[1];
  ::backtrace(warm, 1);
  struct sigaction action {};
  action.sa_sigaction = OnFatalSignal;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  for (int sig : kFatalSignals) ::sigaction(sig, &action, nullptr);
}

}  // namespace chorus
