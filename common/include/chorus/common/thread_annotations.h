// Clang thread-safety annotations and an annotated mutex.
//
// Lock discipline is declared with GUARDED_BY / REQUIRES / EXCLUDES; clang builds
// (the sanitizer build in CI) check it with -Wthread-safety. GCC ignores them.
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

#define CAPABILITY(x) CHORUS_TSA_(capability(x))
#define SCOPED_CAPABILITY CHORUS_TSA_(scoped_lockable)
#define GUARDED_BY(x) CHORUS_TSA_(guarded_by(x))
#define PT_GUARDED_BY(x) CHORUS_TSA_(pt_guarded_by(x))
#define REQUIRES(...) CHORUS_TSA_(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) CHORUS_TSA_(acquire_capability(__VA_ARGS__))
#define RELEASE(...) CHORUS_TSA_(release_capability(__VA_ARGS__))
#define EXCLUDES(...) CHORUS_TSA_(locks_excluded(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS CHORUS_TSA_(no_thread_safety_analysis)

namespace chorus {

// std::mutex with capability annotations (libstdc++'s is not annotated).
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable bound to a Mutex the caller holds.
class CondVar {
 public:
  // Precondition: the caller holds *mu. Returns with *mu held.
  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // As Wait, returning false on timeout.
  template <typename Clock, typename Duration>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& deadline) REQUIRES(mu) {
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
