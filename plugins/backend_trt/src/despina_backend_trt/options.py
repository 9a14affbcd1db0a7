"""The backend-wide options, ``--backend-config=tensorrt,<key>=<value>``, as Triton's
tensorrt backend documents them:

- ``coalesce-request-input`` (boolean, default false): accepted and checked; it has no
  effect here, since every batch's inputs are joined into one host buffer and copied to
  the device once anyway.
- ``plugins``: shared libraries, separated by ``;``, loaded (``RTLD_GLOBAL``) before any
  engine of the model is deserialized, so TensorRT finds the plugin layers they register.
- ``version-compatible`` (boolean, default false): sets the runtime's
  ``engine_host_code_allowed``, so engines built version-compatible (they carry a lean
  runtime, host code the server then runs: trust the models) deserialize.
- ``execution-policy``: ``DEVICE_BLOCKING`` (default) or ``BLOCKING``; see
  :class:`BackendOptions`.

:func:`read_options` raises ConfigError for a bad value, naming the option; the model
that reads it is then UNAVAILABLE with that text.
"""

from __future__ import annotations

import argparse
import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from despina import ConfigError, triton_bool

#: Triton's execution policies (TRITONBACKEND_ExecutionPolicy).
EXECUTION_POLICIES = ("DEVICE_BLOCKING", "BLOCKING")


@dataclass(frozen=True)
class BackendOptions:
    """The parsed options. ``execution_policy``: with ``DEVICE_BLOCKING`` the instances of
    a model on one GPU enqueue their batches one at a time (one lock per GPU, held from the
    input copies to ``execute_async_v3`` and the output copies being queued, not while
    waiting for the stream), which avoids contention between threads launching work on
    one device; with ``BLOCKING`` each instance enqueues on its own. Sequence-batching
    models always run ``BLOCKING``, as in Triton."""

    coalesce_request_input: bool = False
    plugins: tuple[Path, ...] = ()
    version_compatible: bool = False
    execution_policy: str = "DEVICE_BLOCKING"


def read_options(setting: Callable[[str], str | None], backend: str) -> BackendOptions:
    """The options, ``setting(key)`` giving each raw value (None when not given)."""

    def flag(key: str) -> bool:
        raw = setting(key)
        if raw is None:
            return False
        try:
            return triton_bool(raw)
        except argparse.ArgumentTypeError:
            raise ConfigError(
                f"--backend-config={backend},{key}={raw}: expected a boolean (true or false)"
            ) from None

    policy = setting("execution-policy") or "DEVICE_BLOCKING"
    if policy not in EXECUTION_POLICIES:
        raise ConfigError(
            f"--backend-config={backend},execution-policy={policy}: expected one of "
            f"{', '.join(EXECUTION_POLICIES)}"
        )
    libraries = tuple(Path(p.strip()) for p in (setting("plugins") or "").split(";") if p.strip())
    return BackendOptions(
        coalesce_request_input=flag("coalesce-request-input"),
        plugins=libraries,
        version_compatible=flag("version-compatible"),
        execution_policy=policy,
    )


def load_plugins(libraries: tuple[Path, ...], backend: str) -> None:
    """Load each plugin library into the process (a library loaded before is not loaded
    twice: the dynamic loader counts references); raises ConfigError naming the path of
    a missing or unloadable one."""
    for path in libraries:
        if not path.is_file():
            raise ConfigError(
                f"--backend-config={backend},plugins: TensorRT plugin library '{path}' not found"
            )
        try:
            ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            raise ConfigError(
                f"--backend-config={backend},plugins: unable to load TensorRT plugin "
                f"library '{path}': {exc}"
            ) from None
