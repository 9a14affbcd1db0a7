"""``pb_utils.Logger``: model log lines written into the server's log.

Python's ``logging`` (~0.7 MB resident) is imported only for a line logged outside a
server (a model's module run on its own); in a model process lines go to the server.
"""

from __future__ import annotations

from despina_backend_python.pb import runtime
from despina_backend_python.pb.errors import require


class Logger:
    """Use as ``pb_utils.Logger.log_info("...")`` (class-level, like Triton's)."""

    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"
    VERBOSE = "VERBOSE"

    @classmethod
    def log(cls, message: str, level: str = INFO) -> None:
        """Log ``message`` at ``level`` (INFO unless given)."""
        require(message, str, "Logger.log(): message")
        if level not in (cls.INFO, cls.WARNING, cls.ERROR, cls.VERBOSE):
            raise TypeError(f"Logger.log(): unknown log level {level!r}")
        host = runtime.current_or_none()
        if host is None:
            import logging

            logging.getLogger("despina.python").log(_LEVELS[level], "%s", message)
        else:
            host.log(level, str(message))

    @classmethod
    def log_info(cls, message: str) -> None:
        cls.log(message, cls.INFO)

    @classmethod
    def log_warn(cls, message: str) -> None:
        cls.log(message, cls.WARNING)

    @classmethod
    def log_error(cls, message: str) -> None:
        cls.log(message, cls.ERROR)

    @classmethod
    def log_verbose(cls, message: str) -> None:
        cls.log(message, cls.VERBOSE)


#: Logger level -> Python logging level: ``logging``'s INFO, WARNING, ERROR and DEBUG
#: (VERBOSE shows with ``--log-verbose``).
_LEVELS = {"INFO": 20, "WARNING": 30, "ERROR": 40, "VERBOSE": 10}


def python_level(level: str) -> int:
    return _LEVELS.get(level, _LEVELS["INFO"])
