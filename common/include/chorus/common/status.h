// common/: what every part of chorus shares and nothing else: the one error
// type (this header), logging, annotated locks, files, crash reports and the
// labels they name work by (crash_label.h), and the runner of blocking work
// (background_runner.h). It includes no other chorus folder.
//
// chorus' one error type: Status and StatusOr<T>.
//
// Every fallible call inside chorus returns one of these; nothing throws across
// a chorus API. A Python exception raised by model code becomes a Status whose
// python_error() holds the exception's type, message and traceback. gRPC code
// converts a Status to a grpc::Status in exactly one place (server/).
#ifndef CHORUS_COMMON_STATUS_H_
#define CHORUS_COMMON_STATUS_H_

#include <memory>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace chorus {

// The canonical codes (same numbering as gRPC and absl), so that conversion to a
// wire status is a cast.
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// Returns "OK", "INVALID_ARGUMENT", ... as gRPC spells them.
const char* StatusCodeName(StatusCode code);

// What a Python exception carried when it crossed into C++.
struct PythonError {
  std::string type;       // qualified exception type, e.g. "ValueError"
  std::string message;    // str(exception)
  std::string traceback;  // formatted traceback; for logs, never for clients
};

class [[nodiscard]] Status {
 public:
  // An OK status. Cheap: holds no allocation.
  Status() = default;
  Status(StatusCode code, std::string message);
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;
  ~Status() = default;

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  // The message; empty for OK.
  const std::string& message() const;
  // Set only when the error came from a Python exception.
  const PythonError* python_error() const {
    return rep_ && rep_->python ? &*rep_->python : nullptr;
  }

  // Returns a copy carrying the Python exception details.
  Status WithPythonError(PythonError error) const;
  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  Status Annotate(const std::string& context) const;
  // "INVALID_ARGUMENT: message" or "OK".
  std::string ToString() const;

  // Aborts the process with the message if not OK; for tests and programming errors.
  void CheckOk() const;
  // Drops the status on purpose (its error is handled elsewhere, e.g. logged
  // where it was made); the one way past [[nodiscard]].
  void IgnoreError() const {}

 private:
  struct Rep {
    StatusCode code;
    std::string message;
    std::optional<PythonError> python;
  };
  std::unique_ptr<Rep> rep_;
};

inline Status OkStatus() { return Status(); }
Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status InternalError(std::string message);
Status UnavailableError(std::string message);
Status FailedPreconditionError(std::string message);
Status DeadlineExceededError(std::string message);
Status ResourceExhaustedError(std::string message);
Status UnimplementedError(std::string message);
Status AlreadyExistsError(std::string message);
Status DataLossError(std::string message);
Status PermissionDeniedError(std::string message);
// An error built from errno after a failed system call: "<what>: <strerror>".
Status ErrnoError(const std::string& what, int errno_value);

// A value or the error that prevented computing it.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  // Implicit from a non-OK status (an OK status here is a programming error).
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT(runtime/explicit)
    if (status_.ok()) status_ = Status(StatusCode::kInternal, "StatusOr built from an OK status");
  }
  // Implicit from a value.
  template <typename U = T, typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                                        !std::is_same_v<std::decay_t<U>, Status> &&
                                                        !std::is_same_v<std::decay_t<U>, StatusOr>>>
  StatusOr(U&& value) : value_(std::forward<U>(value)) {}  // NOLINT(runtime/explicit)

  bool ok() const { return status_.ok(); }
  const Status& status() const& { return status_; }
  Status status() && { return std::move(status_); }

  // Precondition: ok(). Checked: aborts with the status otherwise.
  T& value() & {
    Check();
    return *value_;
  }
  const T& value() const& {
    Check();
    return *value_;
  }
  T&& value() && {
    Check();
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void Check() const {
    if (!value_) status_.CheckOk();
  }
  Status status_;
  std::optional<T> value_;
};

}  // namespace chorus

#define CHORUS_STATUS_CONCAT_INNER_(a, b) a##b
#define CHORUS_STATUS_CONCAT_(a, b) CHORUS_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define CHORUS_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::chorus::Status chorus_status_ = (expr);        \
    if (!chorus_status_.ok()) return chorus_status_; \
  } while (0)

// `lhs = value of expr` (a StatusOr), or returns its error.
#define CHORUS_ASSIGN_OR_RETURN(lhs, expr) \
  CHORUS_ASSIGN_OR_RETURN_IMPL_(CHORUS_STATUS_CONCAT_(chorus_statusor_, __LINE__), lhs, expr)
#define CHORUS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()

#endif  // CHORUS_COMMON_STATUS_H_
