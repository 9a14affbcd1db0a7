"""Settings parsed once into typed, frozen objects.

The command line is parsed by argparse (every plugin adds its flags through
``despina_addoption``); the result is read exactly once: the core's own flags into
:class:`CoreSettings`, and each plugin's flags, in its ``despina_configure(settings,
stash)``, into its own frozen options object stored under its own :class:`StashKey`
(pytest's ``Stash`` is the model). Everything after start-up reads these typed objects;
nothing reads flag names off the namespace.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from despina.memory.gpus import DEFAULT_MIN_COMPUTE_CAPABILITY
from despina.tracing.config import deprecated_flags

#: tritonserver's default ``--backend-directory``.
DEFAULT_BACKEND_DIRECTORY = "/opt/tritonserver/backends"

T = TypeVar("T")


class StashKey(Generic[T]):
    """A key of :class:`Stash` whose value is a ``T``; keys compare by identity, so two
    plugins can never collide. ``name`` is for error messages only."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"StashKey({self.name!r})"


class Stash:
    """One server's typed settings: the core's under :data:`CORE`, each plugin's under the
    key it owns."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: dict[StashKey[Any], object] = {}

    def __setitem__(self, key: StashKey[T], value: T) -> None:
        self._values[key] = value

    def __getitem__(self, key: StashKey[T]) -> T:
        """The value under ``key``; KeyError naming the key when its plugin stored none."""
        try:
            return cast(T, self._values[key])
        except KeyError:
            raise KeyError(f"no settings stored under {key!r}") from None

    def __contains__(self, key: StashKey[Any]) -> bool:
        return key in self._values


@dataclass(frozen=True)
class CoreSettings:
    """The core's flags (tritonserver's names and defaults; see ``despina serve --help``)."""

    id: str
    exit_timeout_secs: int
    #: Seconds between SIGTERM (readiness false) and the drain (Despina).
    shutdown_grace_period: float
    exit_on_error: bool
    strict_readiness: bool
    busy_poll_us: int
    model_repository: tuple[str, ...]
    model_control_mode: str
    repository_poll_secs: int
    load_model: tuple[str, ...]
    model_load_thread_count: int
    #: How many times a failed model version load is tried again.
    model_load_retry_count: int
    #: False under ``--strict-model-config`` or ``--disable-auto-complete-config``.
    auto_complete: bool
    allow_client_shm: bool
    rate_limit: str
    rate_limit_resource: tuple[str, ...]
    cache_config: tuple[str, ...]
    response_cache_byte_size: int | None
    log_verbose: int
    log_info: bool
    log_warning: bool
    log_error: bool
    log_format: str
    log_file: str | None
    #: ``--backend-config`` values as given (``[<backend>,]<key>=<value>``).
    backend_config: tuple[str, ...]
    #: Why each tritonserver flag given that Despina accepts without effect does nothing.
    inert_flags_given: tuple[str, ...]
    #: tritonserver's warnings for deprecated flags given (its texts).
    flag_warnings: tuple[str, ...]
    #: ``--max-pending-requests`` (Despina's): requests each model version queues (per
    #: priority level) where its config sets no ``max_queue_size``; 0: unbounded.
    max_pending_requests: int = 4096
    #: ``--max-inflight-request-bytes`` (Despina's): bytes request bodies in flight may
    #: hold at once, server-wide (:class:`~despina.inference.request_bodies.BodyBudget`); 0: no budget.
    max_inflight_request_bytes: int = 0
    #: ``--min-supported-compute-capability``: GPUs below it get no instances.
    min_supported_compute_capability: float = DEFAULT_MIN_COMPUTE_CAPABILITY
    #: ``--trace-config`` values, tritonserver's deprecated ``--trace-*`` flags first.
    trace_config: tuple[str, ...] = ()
    #: ``--backend-directory``: holds the Python-based backends (``<name>/model.py``).
    backend_directory: str = DEFAULT_BACKEND_DIRECTORY
    #: ``--serving-processes`` (Despina's): how many serving processes share the ports;
    #: above 1, this server is one of them and refuses what one process cannot serve alone.
    serving_processes: int = 1

    @classmethod
    def from_namespace(cls, flags: argparse.Namespace) -> CoreSettings:
        """Read the core's flags from a parsed ``despina serve`` command line."""
        return cls(
            id=str(flags.id),
            exit_timeout_secs=int(flags.exit_timeout_secs),
            shutdown_grace_period=float(flags.shutdown_grace_period),
            exit_on_error=bool(flags.exit_on_error),
            strict_readiness=bool(flags.strict_readiness),
            busy_poll_us=int(flags.busy_poll_us),
            model_repository=tuple(flags.model_repository or ()),
            model_control_mode=str(flags.model_control_mode),
            repository_poll_secs=int(flags.repository_poll_secs),
            load_model=tuple(flags.load_model or ()),
            model_load_thread_count=int(flags.model_load_thread_count),
            model_load_retry_count=int(flags.model_load_retry_count),
            auto_complete=not (flags.strict_model_config or flags.disable_auto_complete_config),
            allow_client_shm=bool(flags.allow_client_shm),
            rate_limit=str(flags.rate_limit),
            rate_limit_resource=tuple(flags.rate_limit_resource or ()),
            cache_config=tuple(flags.cache_config or ()),
            response_cache_byte_size=flags.response_cache_byte_size,
            log_verbose=int(flags.log_verbose),
            log_info=bool(flags.log_info),
            log_warning=bool(flags.log_warning),
            log_error=bool(flags.log_error),
            log_format=str(flags.log_format),
            log_file=flags.log_file,
            backend_config=tuple(flags.backend_config or ()),
            inert_flags_given=tuple(flags.inert_flags_given),
            flag_warnings=tuple(flags.flag_warnings),
            max_pending_requests=int(flags.max_pending_requests),
            max_inflight_request_bytes=int(flags.max_inflight_request_bytes),
            min_supported_compute_capability=float(flags.min_supported_compute_capability),
            backend_directory=str(flags.backend_directory),
            serving_processes=int(flags.serving_processes),
            trace_config=(
                *deprecated_flags(
                    flags.trace_file,
                    flags.trace_level,
                    flags.trace_rate,
                    flags.trace_count,
                    flags.trace_log_frequency,
                ),
                *(flags.trace_config or ()),
            ),
        )


#: The core's settings in every server's stash.
CORE: StashKey[CoreSettings] = StashKey("despina")
