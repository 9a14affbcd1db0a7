"""``--trace-config`` (and tritonserver's deprecated ``--trace-*`` flags) parsed once.

Triton's syntax: ``--trace-config <setting>=<value>`` for the global settings (``rate``,
``level``, ``count``, ``mode``) and ``--trace-config <mode>,<setting>=<value>`` for a
mode's own (``triton,file=...``, ``triton,log-frequency=...``,
``opentelemetry,url=...``, ``opentelemetry,resource=key=value``,
``opentelemetry,bsp_max_queue_size=...``, ...). The deprecated flags map onto the same
settings (:func:`deprecated_flags`) and come first, so ``--trace-config`` wins.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

MODES = ("triton", "opentelemetry")
LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
#: The level names Triton's command line takes (any case), as the levels they mean.
FLAG_LEVELS = {
    "false": "OFF",
    "off": "OFF",
    "true": "TIMESTAMPS",
    "on": "TIMESTAMPS",
    "min": "TIMESTAMPS",
    "max": "TIMESTAMPS",
    "timestamps": "TIMESTAMPS",
    "tensors": "TENSORS",
}
#: Triton's OTLP/HTTP default endpoint.
DEFAULT_OTEL_URL = "http://localhost:4318/v1/traces"
_OTEL_INTS = ("bsp_max_queue_size", "bsp_schedule_delay", "bsp_max_export_batch_size")


def otlp_http_url(value: str) -> str:
    """The OTLP/HTTP endpoint ``opentelemetry,url=<value>`` names, read as Triton's exporter
    (opentelemetry-cpp's URL parser) reads it: without a scheme it is ``http://``, without
    a path it posts to ``/``, without a port it uses the scheme's. ValueError with the
    reason for what no export could ever reach: an empty URL, a scheme other than http or
    https, no host, a port that is not a number from 1 to 65535."""
    where = f"--trace-config opentelemetry,url={value}"
    text = value.strip()
    split = urlsplit(text if "://" in text else f"http://{text}")
    if split.scheme.lower() not in ("http", "https"):
        raise ValueError(
            f"{where}: scheme '{split.scheme}' is not supported; spans are exported over "
            "OTLP/HTTP, to an http:// or https:// URL"
        )
    if not split.hostname:
        raise ValueError(f"{where}: no host; expected [http[s]://]host[:port][/path]")
    try:
        port = split.port
    except ValueError:
        port = 0
    if port == 0 or split.netloc.endswith(":"):
        raise ValueError(f"{where}: the port must be a number from 1 to 65535")
    return urlunsplit((split.scheme.lower(), split.netloc, split.path or "/", split.query, ""))


def parse_level(values: Iterable[str]) -> list[str]:
    """Trace levels as the extension reports them: ``["OFF"]``, or TIMESTAMPS and/or
    TENSORS in that order; ValueError for another name."""
    chosen = set()
    for value in values:
        level = value.strip().upper()
        if level not in LEVELS:
            raise ValueError(f"unknown trace level '{value}'; expected one of {', '.join(LEVELS)}")
        chosen.add(level)
    kept = [level for level in LEVELS[1:] if level in chosen]
    return kept or ["OFF"]


def flag_level(value: str) -> str:
    """The level a ``--trace-level`` or ``--trace-config level=`` value names, as Triton
    reads it (``min``, ``max``, ``on``, ``true`` are TIMESTAMPS; ``false`` is OFF);
    ValueError with Triton's text for another name."""
    level = FLAG_LEVELS.get(value.lower())
    if level is None:
        raise ValueError(f"invalid value for trace level option: {value.lower()}")
    return level


def parse_int(key: str, value: str, minimum: int) -> int:
    """An integer trace setting no less than ``minimum``; ValueError naming ``key``."""
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError(f"expected an integer for trace setting '{key}', got '{value}'") from None
    if number < minimum:
        raise ValueError(f"trace setting '{key}' must be {minimum} or more, got {number}")
    return number


@dataclass(frozen=True)
class TraceConfig:
    """The trace flags of one server (defaults: Triton's)."""

    levels: tuple[str, ...] = ("OFF",)
    rate: int = 1000
    count: int = -1
    mode: str = "triton"
    file: str = ""
    log_frequency: int = 0
    #: The OTLP/HTTP endpoint, with its scheme (:func:`otlp_http_url`).
    otel_url: str = DEFAULT_OTEL_URL
    #: Resource attributes (``service.name`` defaults to Triton's ``triton-inference-server``).
    otel_resource: tuple[tuple[str, str], ...] = ()
    #: Batch span processor options given (``bsp_max_queue_size``, ``bsp_schedule_delay``
    #: in milliseconds, ``bsp_max_export_batch_size``).
    otel_bsp: tuple[tuple[str, int], ...] = field(default=())

    @classmethod
    def parse(cls, trace_config: Iterable[str] = ()) -> TraceConfig:
        """Read each ``--trace-config`` value in order (a later one wins); ValueError for
        an unknown mode or setting, or a bad value."""
        values: dict[str, object] = {}
        level_values: list[str] = []
        resource: list[tuple[str, str]] = []
        bsp: dict[str, int] = {}
        for item in trace_config:
            head = item.split("=", 1)[0]
            mode, setting = item.split(",", 1) if "," in head else ("", item)
            key, sep, value = setting.partition("=")
            key = key.strip()
            if not sep:
                raise ValueError(f"--trace-config expects [<mode>,]<setting>=<value>, got '{item}'")
            if mode == "":
                if key == "level":
                    level_values.append(flag_level(value))
                elif key in ("rate", "count"):
                    values[key] = parse_int(key, value, 0 if key == "rate" else -1)
                elif key == "mode":
                    if value not in MODES:
                        raise ValueError(
                            f"unknown trace mode '{value}'; expected triton or opentelemetry"
                        )
                    values["mode"] = value
                else:
                    raise ValueError(f"unknown trace setting '{key}' in --trace-config '{item}'")
            elif mode == "triton":
                if key == "file":
                    values["file"] = value
                elif key in ("log-frequency", "log_frequency"):
                    values["log_frequency"] = parse_int("log-frequency", value, 0)
                else:
                    raise ValueError(f"unknown triton trace setting '{key}'")
            elif mode == "opentelemetry":
                if key == "url":
                    values["otel_url"] = otlp_http_url(value)
                elif key == "resource":
                    name, eq, attribute = value.partition("=")
                    if not eq or not name:
                        raise ValueError(f"expected resource=<key>=<value>, got '{item}'")
                    resource.append((name, attribute))
                elif key in _OTEL_INTS:
                    bsp[key] = parse_int(key, value, 1)
                else:
                    raise ValueError(f"unknown opentelemetry trace setting '{key}'")
            else:
                raise ValueError(f"unknown trace mode '{mode}' in --trace-config '{item}'")
        return cls(
            levels=tuple(parse_level(level_values)),
            otel_resource=tuple(resource),
            otel_bsp=tuple(bsp.items()),
            **values,  # type: ignore[arg-type]
        )

    def extension_values(self) -> dict[str, list[str]]:
        """The trace extension's global settings these flags give."""
        return {
            "trace_level": list(self.levels),
            "trace_rate": [str(self.rate)],
            "trace_count": [str(self.count)],
            "log_frequency": [str(self.log_frequency)],
            "trace_file": [self.file],
            "trace_mode": [self.mode],
        }


def deprecated_flags(
    file: str | None,
    levels: Iterable[str] | None,
    rate: int | None,
    count: int | None,
    log_frequency: int | None,
) -> list[str]:
    """tritonserver's deprecated ``--trace-file``, ``--trace-level``, ``--trace-rate``,
    ``--trace-count`` and ``--trace-log-frequency`` as ``--trace-config`` values."""
    given: list[str] = []
    if file is not None:
        given.append(f"triton,file={file}")
    given += [f"level={level}" for level in levels or ()]
    if rate is not None:
        given.append(f"rate={rate}")
    if count is not None:
        given.append(f"count={count}")
    if log_frequency is not None:
        given.append(f"triton,log-frequency={log_frequency}")
    return given
