"""PyTorch settings from a model's ``parameters``, named as Triton's PyTorch backend names them.

Per execution (in the instance's thread): ``INFERENCE_MODE`` (default true; false runs
under ``no_grad``), ``DISABLE_OPTIMIZED_EXECUTION`` (TorchScript graph optimiser off),
``DISABLE_CUDNN``, ``ENABLE_CACHE_CLEANING`` (empty the CUDA cache after each run).
Per instance thread: ``INTRA_OP_THREAD_COUNT`` / ``NUM_THREADS``; without them a model
with N > 1 CPU instances gives each instance thread ``max(1, cores // N)`` (so N instances
never compete for the same cores), one instance keeps torch's default. Process-wide (first
model wins, as in Triton): ``INTER_OP_THREAD_COUNT`` / ``NUM_INTEROP_THREADS``,
``ENABLE_JIT_EXECUTOR``, ``ENABLE_JIT_PROFILING``. ``ENABLE_WEIGHT_SHARING`` lets the
instances on one device share one loaded module. ``ENABLE_NVFUSER`` is accepted and
ignored: current torch has no nvFuser.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from despina import ConfigError

log = logging.getLogger("despina.backend.pytorch")

#: torch's intra-op thread count before any instance changed it. torch.set_num_threads
#: also sets the count later threads start with, so every instance thread sets its own.
_default_threads: list[int] = []

_TRUE = ("1", "true", "on", "yes")
_FALSE = ("0", "false", "off", "no")


@dataclass(frozen=True)
class TorchSettings:
    """The parsed parameters; ``None`` means "leave torch's default"."""

    inference_mode: bool = True
    optimized_execution: bool = True
    disable_cudnn: bool = False
    cache_cleaning: bool = False
    weight_sharing: bool = False
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    jit_executor: bool | None = None
    jit_profiling: bool | None = None

    @classmethod
    def from_parameters(cls, params: dict[str, str], model: str) -> TorchSettings:
        """Parse ``params``; raise ConfigError naming the model for a bad value."""

        def flag(key: str, default: bool | None) -> bool | None:
            value = params.get(key, "").strip().lower()
            if not value:
                return default
            if value in _TRUE or value in _FALSE:
                return value in _TRUE
            raise ConfigError(
                f"model '{model}': parameter '{key}' must be true or false, got '{value}'"
            )

        def count(*keys: str) -> int:
            for key in keys:
                value = params.get(key, "").strip()
                if value:
                    try:
                        return max(int(value), 0)
                    except ValueError:
                        raise ConfigError(
                            f"model '{model}': parameter '{key}' must be an integer, got '{value}'"
                        ) from None
            return 0

        if "ENABLE_NVFUSER" in params:
            log.warning("model '%s': ENABLE_NVFUSER has no effect (torch has no nvFuser)", model)
        return cls(
            inference_mode=bool(flag("INFERENCE_MODE", True)),
            optimized_execution=not flag("DISABLE_OPTIMIZED_EXECUTION", False),
            disable_cudnn=bool(flag("DISABLE_CUDNN", False)),
            cache_cleaning=bool(flag("ENABLE_CACHE_CLEANING", False)),
            weight_sharing=bool(flag("ENABLE_WEIGHT_SHARING", False)),
            intra_op_threads=count("INTRA_OP_THREAD_COUNT", "NUM_THREADS"),
            inter_op_threads=count("INTER_OP_THREAD_COUNT", "NUM_INTEROP_THREADS"),
            jit_executor=flag("ENABLE_JIT_EXECUTOR", None),
            jit_profiling=flag("ENABLE_JIT_PROFILING", None),
        )

    def apply_process_wide(self) -> None:
        """Set the process-wide switches this config names (torch allows inter-op
        threads to be set once; a later different value is logged and ignored)."""
        import torch

        if not _default_threads:
            _default_threads.append(torch.get_num_threads())
        if self.jit_executor is not None:
            torch._C._jit_set_profiling_executor(self.jit_executor)
        if self.jit_profiling is not None:
            torch._C._jit_set_profiling_mode(self.jit_profiling)
        if self.inter_op_threads and torch.get_num_interop_threads() != self.inter_op_threads:
            try:
                torch.set_num_interop_threads(self.inter_op_threads)
            except RuntimeError as exc:
                log.warning(
                    "inter-op thread count stays %d: %s", torch.get_num_interop_threads(), exc
                )

    def init_thread(self) -> None:
        """Run first in each instance's worker thread: its intra-op thread count (the
        configured one, else torch's default), whatever other models set before."""
        import torch

        torch.set_num_threads(self.intra_op_threads or _default_threads[0])

    def guards(self) -> contextlib.ExitStack:
        """The context one execution runs in (grad mode, TorchScript optimiser, cuDNN)."""
        import torch

        stack = contextlib.ExitStack()
        stack.enter_context(torch.inference_mode() if self.inference_mode else torch.no_grad())
        stack.enter_context(torch.jit.optimized_execution(self.optimized_execution))  # type: ignore[attr-defined]
        if self.disable_cudnn:
            stack.enter_context(torch.backends.cudnn.flags(enabled=False))
        return stack
