"""The server's :class:`Options` (Triton's names and defaults) and the ``despina serve``
command line they become.

Options are checked when the server starts, as Triton does: a value of the wrong type
raises TypeError, no model repository InvalidArgumentError. Options Despina has no use
for (memory pools, backend and repository-agent directories, ...) are checked and
otherwise ignored; the plugin's README lists them.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from tritonserver._enums import InstanceGroupKind, LogFormat, ModelControlMode, RateLimitMode
from tritonserver._errors import InvalidArgumentError


@dataclass(slots=True)
class RateLimiterResource:
    """``count`` of resource ``name`` available on device ``device``."""

    name: str
    count: int
    device: int


@dataclass(slots=True)
class ModelLoadDeviceLimit:
    """A memory limit for loading models on a device (accepted, not applied)."""

    kind: InstanceGroupKind
    device: int
    fraction: float


@dataclass(slots=True)
class Options:
    """Server options: Triton's ``tritonserver.Options``, field for field."""

    model_repository: str | list[str] = field(default_factory=list)
    server_id: str = "triton"
    model_control_mode: ModelControlMode = ModelControlMode.NONE
    startup_models: list[str] = field(default_factory=list)
    strict_model_config: bool = False
    rate_limiter_mode: RateLimitMode = RateLimitMode.OFF
    rate_limiter_resources: list[RateLimiterResource] = field(default_factory=list)
    pinned_memory_pool_size: int = 1 << 28
    cuda_memory_pool_sizes: dict[int, int] = field(default_factory=dict)
    cache_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    cache_directory: str = "/opt/tritonserver/caches"
    min_supported_compute_capability: float = 6.0
    exit_on_error: bool = True
    strict_readiness: bool = True
    exit_timeout: int = 30
    buffer_manager_thread_count: int = 0
    model_load_thread_count: int = 4
    model_load_retry_count: int = 0
    model_namespacing: bool = False
    enable_peer_access: bool = True
    log_file: str | None = None
    log_info: bool = False
    log_warn: bool = False
    log_error: bool = False
    log_format: LogFormat = LogFormat.DEFAULT
    log_verbose: int = 0
    metrics: bool = True
    gpu_metrics: bool = True
    cpu_metrics: bool = True
    metrics_interval: int = 2000
    backend_directory: str = "/opt/tritonserver/backends"
    repo_agent_directory: str = "/opt/tritonserver/repoagents"
    model_load_device_limits: list[ModelLoadDeviceLimit] = field(default_factory=list)
    backend_configuration: dict[str, dict[str, str]] = field(default_factory=dict)
    host_policies: dict[str, dict[str, str]] = field(default_factory=dict)
    metrics_configuration: dict[str, dict[str, str]] = field(default_factory=dict)


#: The type each option must have (a tuple: any of them); containers are checked shallowly.
_TYPES: dict[str, type | tuple[type, ...]] = {
    "model_repository": (str, list),
    "server_id": str,
    "model_control_mode": ModelControlMode,
    "startup_models": list,
    "strict_model_config": bool,
    "rate_limiter_mode": RateLimitMode,
    "rate_limiter_resources": list,
    "pinned_memory_pool_size": int,
    "cuda_memory_pool_sizes": dict,
    "cache_config": dict,
    "cache_directory": str,
    "min_supported_compute_capability": (float, int),
    "exit_on_error": bool,
    "strict_readiness": bool,
    "exit_timeout": int,
    "buffer_manager_thread_count": int,
    "model_load_thread_count": int,
    "model_load_retry_count": int,
    "model_namespacing": bool,
    "enable_peer_access": bool,
    "log_file": (str, type(None)),
    "log_info": bool,
    "log_warn": bool,
    "log_error": bool,
    "log_format": LogFormat,
    "log_verbose": int,
    "metrics": bool,
    "gpu_metrics": bool,
    "cpu_metrics": bool,
    "metrics_interval": int,
    "backend_directory": str,
    "repo_agent_directory": str,
    "model_load_device_limits": list,
    "backend_configuration": dict,
    "host_policies": dict,
    "metrics_configuration": dict,
}


def check(options: Options) -> None:
    """InvalidArgumentError without a model repository; TypeError for a value of the wrong
    type or a negative count."""
    if options.model_repository is None:
        raise InvalidArgumentError("Model repository must be specified.")
    for item in dataclasses.fields(options):
        value = getattr(options, item.name)
        expected = _TYPES[item.name]
        wrong_bool = isinstance(value, bool) and expected in (int, (float, int))
        if not isinstance(value, expected) or wrong_bool:
            raise TypeError(f"option {item.name}: {value!r} is not of type {item.type}")
        if isinstance(value, int) and not isinstance(value, bool | IntEnum) and value < 0:
            raise TypeError(f"option {item.name}: {value} is negative")
    repositories = _repositories(options)
    if not all(isinstance(path, str) for path in repositories):
        raise TypeError("option model_repository: paths must be str")


def _repositories(options: Options) -> list[str]:
    repository = options.model_repository
    return [repository] if isinstance(repository, str) else list(repository)


def local_repositories(options: Options) -> list[str]:
    """The repositories that are local folders (not ``s3://`` and other URLs)."""
    return [path for path in _repositories(options) if "://" not in path]


def serve_args(options: Options) -> list[str]:
    """The ``despina serve`` flags of ``options`` (checked first: :func:`check`), no
    listener among them: tritonfrontend starts those."""
    check(options)
    args = [f"--model-repository={path}" for path in _repositories(options)]
    args += [
        f"--id={options.server_id}",
        f"--model-control-mode={options.model_control_mode.name.lower()}",
        f"--strict-model-config={_flag(options.strict_model_config)}",
        f"--exit-on-error={_flag(options.exit_on_error)}",
        f"--strict-readiness={_flag(options.strict_readiness)}",
        f"--exit-timeout-secs={options.exit_timeout}",
        f"--model-load-thread-count={max(options.model_load_thread_count, 1)}",
        f"--min-supported-compute-capability={options.min_supported_compute_capability}",
        *_log_args(options),
        "--allow-http=false",
        "--allow-grpc=false",
        *_metrics_args(options),
    ]
    args += [f"--load-model={name}" for name in options.startup_models]
    if options.rate_limiter_mode == RateLimitMode.EXEC_COUNT:
        args.append("--rate-limit=execution_count")
        args += [
            f"--rate-limit-resource={r.name}:{r.count}:{r.device}"
            for r in options.rate_limiter_resources
        ]
    for cache, settings in options.cache_config.items():
        args += [f"--cache-config={cache},{key}={_text(value)}" for key, value in settings.items()]
    return args


def _metrics_args(options: Options) -> list[str]:
    """The server's own metrics, what ``Server.metrics()`` reads: collected (by
    despina-metrics-prometheus, where installed) without a port of their own."""
    if importlib.util.find_spec("despina_metrics_prometheus") is None:
        return ["--allow-metrics=false"]
    return [
        f"--allow-metrics={_flag(options.metrics)}",
        "--metrics-on-http-port=true",
        f"--allow-gpu-metrics={_flag(options.gpu_metrics)}",
        f"--allow-cpu-metrics={_flag(options.cpu_metrics)}",
        f"--metrics-interval-ms={options.metrics_interval}",
    ]


def _log_args(options: Options) -> list[str]:
    """Triton's cascade: verbose implies info, info warn, warn error."""
    info = options.log_info or options.log_verbose > 0
    warn = options.log_warn or info
    error = options.log_error or warn
    log_format = "ISO8601" if options.log_format == LogFormat.ISO8601 else "default"
    args = [
        f"--log-verbose={options.log_verbose}",
        f"--log-info={_flag(info)}",
        f"--log-warning={_flag(warn)}",
        f"--log-error={_flag(error)}",
        f"--log-format={log_format}",
    ]
    if options.log_file:
        args.append(f"--log-file={options.log_file}")
    return args


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
