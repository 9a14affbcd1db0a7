"""Settings clients may read and change at run time: logging and trace settings.

Both frontends (HTTP ``/v2/logging``, ``/v2/trace/setting``; gRPC ``LogSettings``,
``TraceSetting``) read and update these objects. The log file can never be changed by a
client (Triton's CVE-2024-0087 let a client append logs to any file).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from despina.errors import InvalidArgument

if TYPE_CHECKING:
    from despina.serving.settings import CoreSettings

_LOG_BOOL_KEYS = ("log_info", "log_warning", "log_error")
_TRACE_KEYS = (
    "trace_level",
    "trace_rate",
    "trace_count",
    "log_frequency",
    "trace_file",
    "trace_mode",
)


@dataclass
class LogSettings:
    """Triton's logging extension settings, applied to Python's ``despina`` loggers."""

    log_file: str = ""
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"

    @classmethod
    def from_settings(cls, settings: CoreSettings) -> LogSettings:
        result = cls(
            log_file=settings.log_file or "",
            log_info=settings.log_info,
            log_warning=settings.log_warning,
            log_error=settings.log_error,
            log_verbose_level=settings.log_verbose,
            log_format=settings.log_format,
        )
        result.apply()
        return result

    def as_dict(self) -> dict[str, Any]:
        return {
            "log_file": self.log_file,
            "log_info": self.log_info,
            "log_warning": self.log_warning,
            "log_error": self.log_error,
            "log_verbose_level": self.log_verbose_level,
            "log_format": self.log_format,
        }

    def update(self, changes: dict[str, Any]) -> None:
        """Apply a client's changes; InvalidArgument for unknown keys, bad values or log_file."""
        for key, value in changes.items():
            if key == "log_file":
                if value != self.log_file:
                    raise InvalidArgument("log_file cannot be changed at run time")
            elif key in _LOG_BOOL_KEYS:
                if not isinstance(value, bool):
                    raise InvalidArgument(f"expected a boolean for '{key}'")
                setattr(self, key, value)
            elif key == "log_verbose_level":
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise InvalidArgument("expected a non-negative integer for 'log_verbose_level'")
                self.log_verbose_level = value
            elif key == "log_format":
                if value not in ("default", "ISO8601"):
                    raise InvalidArgument(f"unknown log format '{value}'")
                self.log_format = value
            else:
                raise InvalidArgument(f"unknown log setting '{key}'")
        self.apply()

    def apply(self) -> None:
        """Set the ``despina`` logger's level from these settings."""
        if self.log_verbose_level > 0:
            level = logging.DEBUG
        elif self.log_info:
            level = logging.INFO
        elif self.log_warning:
            level = logging.WARNING
        elif self.log_error:
            level = logging.ERROR
        else:
            level = logging.CRITICAL + 1
        logging.getLogger("despina").setLevel(level)


@dataclass
class TraceSettings:
    """Triton's trace extension settings (global and per model), as reported; the
    :class:`~despina.tracing.tracer.Tracer` applies them."""

    values: dict[str, list[str]] = field(default_factory=dict)
    per_model: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def get(self, model: str = "") -> dict[str, list[str]]:
        merged = dict(self.values)
        if model:
            merged.update(self.per_model.get(model, {}))
        return merged

    def update(self, changes: dict[str, Any], model: str = "") -> dict[str, list[str]]:
        """Store changes (a None value resets a model's key to the global one)."""
        target = self.per_model.setdefault(model, {}) if model else self.values
        for key, value in changes.items():
            if key not in _TRACE_KEYS:
                raise InvalidArgument(f"unknown trace setting '{key}'")
            if key == "trace_file" and value not in (None, "", [""]):
                raise InvalidArgument("trace_file cannot be changed at run time")
            if value is None:
                if model:
                    target.pop(key, None)
                continue
            values = value if isinstance(value, list) else [value]
            if not values or not all(_is_setting_value(v) for v in values):
                raise InvalidArgument(
                    f"expected a string, a number or a list of them for trace setting '{key}'"
                )
            target[key] = [str(v) for v in values]
        return self.get(model)


def _is_setting_value(value: Any) -> bool:
    """A string or a number (not a boolean, not null): what a trace setting holds."""
    return isinstance(value, str | int | float) and not isinstance(value, bool)
