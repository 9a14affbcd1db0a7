"""What the pb_utils API needs from its host: logging, metrics, model control (BLS is
:class:`.messages.BlsHost`, which every host also is).

In the server process (in-process mode) the host is the server itself; in a child
process it forwards each call to the server over the instance's channel. The active host
is per context (set around ``initialize``/``execute``) with a process-wide fallback for
threads the model starts itself.
"""

from __future__ import annotations

import abc
import contextvars
from typing import Any


class Runtime(abc.ABC):
    """The host of model code. Methods may be called from any thread of the model."""

    model_name: str = ""
    #: The model's version folder, what ``pb_utils.get_model_dir()`` returns.
    model_dir: str = ""

    @abc.abstractmethod
    def log(self, level: str, message: str) -> None:
        """Write ``message`` to the server log; level is INFO/WARNING/ERROR/VERBOSE."""

    @abc.abstractmethod
    def metric(self, action: str, family: str, **fields: Any) -> float:
        """A custom-metric operation on the server's registry (see ``ServerRuntime.metric``
        in :mod:`despina_backend_python.server.model_host`); returns a handle or a value."""

    @abc.abstractmethod
    def model_control(self, action: str, **fields: Any) -> Any:
        """``ready``/``load``/``unload`` of another model (Triton's model loading API)."""


_current: contextvars.ContextVar[Runtime | None] = contextvars.ContextVar(
    "despina_pb_runtime", default=None
)
_fallback: list[Runtime] = []


def current() -> Runtime:
    """The active host; raises TritonModelException outside a model."""
    runtime = _current.get()
    if runtime is None and _fallback:
        runtime = _fallback[-1]
    if runtime is None:
        from despina_backend_python.pb.errors import TritonModelException

        raise TritonModelException("this call is only available inside a Python model")
    return runtime


def current_or_none() -> Runtime | None:
    runtime = _current.get()
    return runtime if runtime is not None else (_fallback[-1] if _fallback else None)


def activate(runtime: Runtime) -> contextvars.Token[Runtime | None]:
    """Make ``runtime`` the host of this context (and the fallback for new threads)."""
    if runtime not in _fallback:
        _fallback.append(runtime)
    return _current.set(runtime)


def deactivate(token: contextvars.Token[Runtime | None]) -> None:
    _current.reset(token)


def is_active(runtime: Runtime) -> bool:
    """Whether ``runtime`` still hosts a model: activated and not forgotten since."""
    return runtime in _fallback


def forget(runtime: Runtime) -> None:
    """Drop ``runtime`` from the fallbacks (its model unloaded)."""
    if runtime in _fallback:
        _fallback.remove(runtime)
