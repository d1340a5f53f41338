"""`pb_utils.Logger`: a model's messages in the server's log.

Messages go to `_chorus.log(level, message)`, which obeys the server's log settings
(verbose messages only when verbose logging is on). Outside a chorus server they go to
stderr. Triton's log lines also name the model file and line that logged; chorus' carry
the message only.
"""

import enum
import sys
from typing import Any

from .native import optional_chorus_module

__all__ = ["LogLevel", "Logger", "server_log"]


class LogLevel(enum.IntEnum):
    """Logger's levels, numbered as `_chorus.log` takes them."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


def server_log(level: LogLevel, message: str) -> None:
    """Writes `message` to the server's log (stderr outside chorus)."""
    chorus = optional_chorus_module()
    log = getattr(chorus, "log", None)
    if log is None:
        print(f"{level.name}: {message}", file=sys.stderr)
        return
    log(int(level), message)


def _check_message(message: Any) -> str:
    if not isinstance(message, str):
        raise TypeError(f"Logger: message must be a str, got {type(message)}")
    return message


class Logger:
    """`Logger.log(message, level=Logger.INFO)` and `log_info/log_warn/log_error/
    log_verbose(message)`."""

    LogLevel = LogLevel  # Triton's nested enum: Logger.LogLevel.INFO
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: int = LogLevel.INFO) -> None:
        _check_message(message)
        if not isinstance(level, LogLevel):  # Triton takes its enum only, not ints
            raise TypeError(f"Logger.log(): level must be a Logger level, got {type(level)}")
        server_log(LogLevel(level), message)

    @staticmethod
    def log_info(message: str) -> None:
        server_log(LogLevel.INFO, _check_message(message))

    @staticmethod
    def log_warn(message: str) -> None:
        server_log(LogLevel.WARNING, _check_message(message))

    @staticmethod
    def log_error(message: str) -> None:
        server_log(LogLevel.ERROR, _check_message(message))

    @staticmethod
    def log_verbose(message: str) -> None:
        server_log(LogLevel.VERBOSE, _check_message(message))
