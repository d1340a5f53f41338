// Clang thread-safety annotations and an annotated mutex.
//
// Lock discipline is declared with CHORUS_GUARDED_BY, CHORUS_REQUIRES and
// CHORUS_EXCLUDES; clang builds (the sanitizer build in CI) check it with
// -Wthread-safety. GCC ignores them.
#ifndef CHORUS_COMMON_THREAD_ANNOTATIONS_H_
#define CHORUS_COMMON_THREAD_ANNOTATIONS_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define CHORUS_TSA_(x) __attribute__((x))
#else
#define CHORUS_TSA_(x)
#endif

// Prefixed: abseil (which gRPC headers bring) defines the bare names.
#define CHORUS_CAPABILITY(x) CHORUS_TSA_(capability(x))
#define CHORUS_SCOPED_CAPABILITY CHORUS_TSA_(scoped_lockable)
#define CHORUS_GUARDED_BY(x) CHORUS_TSA_(guarded_by(x))
#define CHORUS_PT_GUARDED_BY(x) CHORUS_TSA_(pt_guarded_by(x))
#define CHORUS_REQUIRES(...) CHORUS_TSA_(requires_capability(__VA_ARGS__))
#define CHORUS_ACQUIRE(...) CHORUS_TSA_(acquire_capability(__VA_ARGS__))
#define CHORUS_RELEASE(...) CHORUS_TSA_(release_capability(__VA_ARGS__))
#define CHORUS_EXCLUDES(...) CHORUS_TSA_(locks_excluded(__VA_ARGS__))
#define CHORUS_NO_THREAD_SAFETY_ANALYSIS CHORUS_TSA_(no_thread_safety_analysis)

namespace chorus {

// std::mutex with capability annotations (libstdc++'s is not annotated).
class CHORUS_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void Lock() CHORUS_ACQUIRE() { mu_.lock(); }
  void Unlock() CHORUS_RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class CHORUS_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) CHORUS_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() CHORUS_RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable bound to a Mutex the caller holds.
class CondVar {
 public:
  // Precondition: the caller holds *mu. Returns with *mu held.
  void Wait(Mutex* mu) CHORUS_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // As Wait, returning false on timeout.
  template <typename Clock, typename Duration>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& deadline)
      CHORUS_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    bool notified = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return notified;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace chorus

#endif  // CHORUS_COMMON_THREAD_ANNOTATIONS_H_
