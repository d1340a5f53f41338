"""chorus: the Python side of the chorus runtime.

Inside a chorus interpreter, `chorus` tells model code where it runs:

    import chorus
    chorus.interpreter_index()  # which of the process' interpreters this is

Outside chorus (plain Python), importing this package works and
`inside_chorus()` is False, so model code can run in both.
"""

try:
    import _chorus
except ImportError:  # plain Python, not a chorus interpreter
    _chorus = None

__all__ = ["inside_chorus", "interpreter_index", "DeadlineExceeded"]


def inside_chorus() -> bool:
    """True when running in an interpreter created by chorus."""
    return _chorus is not None


def interpreter_index() -> int:
    """Index of this interpreter in its InterpreterManager, or -1 outside chorus."""
    return _chorus.index if _chorus is not None else -1


if _chorus is not None:
    DeadlineExceeded = _chorus.DeadlineExceeded
else:
    class DeadlineExceeded(BaseException):  # type: ignore[no-redef]  # one of two definitions
        """Raised inside a call that ran past its deadline."""
