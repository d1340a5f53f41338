#include "chorus/common/crash_report.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace chorus {
namespace {

constexpr size_t kContextBytes = 1024;
constexpr int kMaxHooks = 8;

// The thread's context, levels separated by " > ". `length` is published
// after the bytes, so a handler interrupting a write sees a consistent prefix.
struct ThreadContext {
  char text[kContextBytes];
  size_t length = 0;
};
thread_local ThreadContext tls_context;

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

ScopedCrashContext::ScopedCrashContext(std::string_view what)
    : restore_length_(tls_context.length) {
  if (restore_length_ > 0) Append(" > ");
  Append(what);
}

void ScopedCrashContext::Append(std::string_view more) {
  ThreadContext& context = tls_context;
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

ScopedCrashContext::~ScopedCrashContext() { tls_context.length = restore_length_; }

void WriteCrashContext(int fd) {
  const ThreadContext& context = tls_context;
  const size_t length = context.length;
  std::atomic_signal_fence(std::memory_order_acquire);
  Write(fd, "  running: ");
  if (length == 0) {
    Write(fd, "nothing chorus knows of (not a model call)");
  } else {
    Write(fd, context.text, length);
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
  const ThreadContext& context = tls_context;
  const size_t length = context.length;
  std::atomic_signal_fence(std::memory_order_acquire);
  Write(fd, context.text, length);
  Write(fd, "\n");
}

void AddCrashReportHook(CrashReportHook hook) {
  const int i = g_hook_count.fetch_add(1);
  if (i < kMaxHooks) g_hooks[i].store(hook, std::memory_order_release);
}

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
