"""Triton's error types: `TritonError` (a value carried by responses) and
`TritonModelException` (raised by API misuse, and by models to fail a call).

`TritonError.code()` is an `ErrorCode`, an IntEnum, so it also compares equal to the
TRITONSERVER_Error_Code integers (Triton's pybind enum does not; code that compares with
the named constants, as Triton's documentation does, behaves the same).

`describe_exception` writes an exception the way Triton's stub reports one that escaped
`execute` ("Type: message" then the frames, innermost first, as pybind11 writes them).
"""

import enum
import os
import traceback

__all__ = ["ErrorCode", "TritonError", "TritonModelException", "error_code_of_status",
           "describe_exception"]


class ErrorCode(enum.IntEnum):
    """TRITONSERVER_Error_Code."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


class TritonModelException(Exception):
    """Raised by the Python-backend API on misuse; models raise it to fail a call."""

    def message(self) -> str:
        """The message (Triton's pure-Python versions of this class had this method)."""
        return str(self)


class TritonError:
    """An error a response carries: `TritonError(message, code=TritonError.INTERNAL)`."""

    UNKNOWN = ErrorCode.UNKNOWN
    INTERNAL = ErrorCode.INTERNAL
    NOT_FOUND = ErrorCode.NOT_FOUND
    INVALID_ARG = ErrorCode.INVALID_ARG
    UNAVAILABLE = ErrorCode.UNAVAILABLE
    UNSUPPORTED = ErrorCode.UNSUPPORTED
    ALREADY_EXISTS = ErrorCode.ALREADY_EXISTS
    CANCELLED = ErrorCode.CANCELLED

    def __init__(self, message: str, code: ErrorCode = ErrorCode.INTERNAL):
        if not isinstance(message, str):
            raise TypeError(f"TritonError(): message must be a str, got {type(message)}")
        if isinstance(code, bool) or not isinstance(code, int):
            raise TypeError(f"TritonError(): code must be a TritonError code, got {type(code)}")
        try:
            self._code = ErrorCode(code)
        except ValueError:
            raise TypeError(f"TritonError(): {code} is not a TritonError code") from None
        self._message = message

    def message(self) -> str:
        return self._message

    def code(self) -> ErrorCode:
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, TritonError.{self._code.name})"


# The status names chorus' in-process calls fail with (chorus.serving.ModelCallError.code),
# as the TRITONSERVER_Error_Code Triton's server would have given.
_CODE_OF_STATUS = {
    "NOT_FOUND": ErrorCode.NOT_FOUND,
    "INVALID_ARGUMENT": ErrorCode.INVALID_ARG,
    "FAILED_PRECONDITION": ErrorCode.INVALID_ARG,
    "OUT_OF_RANGE": ErrorCode.INVALID_ARG,
    "UNAVAILABLE": ErrorCode.UNAVAILABLE,
    "RESOURCE_EXHAUSTED": ErrorCode.UNAVAILABLE,
    # Triton reports an expired request timeout as UNAVAILABLE.
    "DEADLINE_EXCEEDED": ErrorCode.UNAVAILABLE,
    "INTERNAL": ErrorCode.INTERNAL,
    "UNIMPLEMENTED": ErrorCode.UNSUPPORTED,
    "ALREADY_EXISTS": ErrorCode.ALREADY_EXISTS,
    "CANCELLED": ErrorCode.CANCELLED,
}


def error_code_of_status(status: str) -> ErrorCode:
    """The TritonError code for a chorus status name ("NOT_FOUND"...); UNKNOWN if none."""
    return _CODE_OF_STATUS.get(status, ErrorCode.UNKNOWN)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def describe_exception(exc: BaseException) -> str:
    """`exc` as Triton's stub reports it: "Type: message", then "At:" and the frames of
    the model's code, innermost first (this package's own frames left out: in Triton the
    caller of `execute` is C++)."""
    text = f"{type(exc).__name__}: {str(exc) or '<EMPTY MESSAGE>'}"
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if not os.path.abspath(frame.filename).startswith(_PACKAGE_DIR + os.sep)]
    if not frames:
        return text
    lines = "".join(f"  {frame.filename}({frame.lineno}): {frame.name}\n"
                    for frame in reversed(frames))
    return f"{text}\n\nAt:\n{lines}"
