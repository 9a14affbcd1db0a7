"""What a backend plugin implements: a :class:`Backend` per loaded model version and a
:class:`ModelInstance` per instance of its ``instance_group``.

Lifecycle, driven by the model manager:

1. ``Backend(context)`` — once per model version, cheap (no framework work yet).
2. ``await backend.auto_complete()`` — only when auto-complete is enabled, on a backend
   the config pipeline (:mod:`despina.repository.config_pipeline`) makes for it; fills missing parts
   of ``context.config``, the pipeline's draft (inputs, outputs, max_batch_size), from
   the model file.
3. ``await backend.load()`` — load shared state (weights) once for all instances.
4. ``await backend.create_instance(spec)`` — once per instance (``count`` x groups), all
   at once where the backend sets ``parallel_instance_loading``, else one after another.
5. ``await instance.execute(requests)`` — many times, from the scheduler.
6. ``await instance.close()`` for every instance, then ``await backend.unload()``.

Any exception from steps 2 to 4 makes the model UNAVAILABLE with the exception's text as reason.
From step 3 on, ``context.config`` is the model's frozen config: read it, never write it.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from despina.inference.request import InferenceRequest, InferenceResponse
from despina.models.call_placement import NeedsThread
from despina.repository.config import ModelConfig, parameters_of
from despina.repository.paths import safe_join

if TYPE_CHECKING:
    from despina.serving.custom_metrics import CustomMetrics
    from despina.serving.settings import Stash


class BackendHost(Protocol):
    """What a backend and its models may use of the server: its flags, BLS requests,
    model control (``pb_utils.load_model`` and friends) and custom metrics."""

    #: The server's typed settings: a backend reads its plugin's options under its key
    #: (``--backend-config`` through :meth:`default_max_batch_size`).
    stash: Stash
    #: Custom metric families models create (``pb_utils.MetricFamily``).
    custom_metrics: CustomMetrics

    @property
    def exit_timeout_s(self) -> float:
        """``--exit-timeout-secs``: how long shutdown waits for running work."""
        ...

    def default_max_batch_size(self, backend: str) -> int:
        """``--backend-config=[<backend>,]default-max-batch-size=N``, else Triton's 4."""
        ...

    def backend_setting(self, backend: str, key: str) -> str | None:
        """The value of ``--backend-config=[<backend>,]<key>=<value>``, or None."""
        ...

    async def bls_infer(self, caller: str, request: InferenceRequest) -> InferenceResponse:
        """Run a request from model ``caller`` on a non-decoupled model (recorded as a model
        ``caller`` uses, for ``unload_dependents``); its error raised."""
        ...

    def bls_stream(
        self, caller: str, request: InferenceRequest
    ) -> AsyncGenerator[InferenceResponse, None]:
        """Every response of a request from model ``caller`` on any model."""
        ...

    def model_ready(self, name: str, version: str = "") -> bool: ...

    async def load(
        self, name: str, config: str | None = None, files: Mapping[str, bytes] | None = None
    ) -> None: ...

    async def unload(self, name: str, unload_dependents: bool = False) -> None: ...


@dataclass
class ModelContext:
    """Everything a backend knows about the model version it serves."""

    name: str
    version: int
    #: The model's folder in the repository (holds config.pbtxt and version folders).
    model_dir: Path
    config: ModelConfig
    #: What the backend may use of the server (flags, BLS, model control, metrics).
    host: BackendHost
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("despina.model"))
    #: A Python-based backend's folder (``<backend-directory>/<backend>``), whose
    #: ``model.py`` serves the model; None for every other model.
    runtime_dir: Path | None = None

    @property
    def version_dir(self) -> Path:
        """``<model_dir>/<version>``."""
        return self.model_dir / str(self.version)

    @property
    def model_file(self) -> Path:
        """The model file: ``default_model_filename`` in the version folder (a
        Python-based backend's ``model.py`` in its :attr:`runtime_dir`); raises
        InvalidArgument when that name leads out of it."""
        if self.runtime_dir is not None:
            return self.runtime_dir / PYTHON_RUNTIME
        return safe_join(
            self.version_dir, self.config.default_model_filename, "default_model_filename"
        )

    @property
    def parameters(self) -> dict[str, str]:
        """The config's ``parameters`` as ``{key: string_value}``."""
        return parameters_of(self.config)


@dataclass(frozen=True)
class InstanceSpec:
    """One instance to create: Triton's instance name, kind and device."""

    name: str
    #: "KIND_CPU", "KIND_GPU" or "KIND_MODEL".
    kind: str
    device_id: int
    group_index: int
    index_in_group: int


#: ``max_in_flight`` of an instance that runs many executions at once (async models).
CONCURRENT_EXECUTIONS = 64

#: A Python-based backend's file, and the config's ``runtime`` for its models (Triton's).
PYTHON_RUNTIME = "model.py"


class ModelInstance(abc.ABC):
    """One execution instance. The scheduler has at most ``max_in_flight`` ``execute``
    calls outstanding on it at once (one by default)."""

    #: More than 1 when the instance takes several ``execute`` calls at once: async
    #: models run them concurrently; a backend may also queue them to hide hand-off
    #: latency (calls still run one after another, in order).
    max_in_flight: int = 1
    #: Whether :meth:`execute` takes inputs that are :class:`~despina.DeviceArray`\ s (on a
    #: GPU: an ensemble step's or a BLS caller's device output, a CUDA shared-memory input).
    #: False: the server copies them to host memory before they are queued.
    device_inputs: bool = False

    @abc.abstractmethod
    async def execute(
        self, requests: Sequence[InferenceRequest]
    ) -> Sequence[InferenceResponse] | None:
        """Run a batch of requests.

        Return one response per request in order, or None when the backend answered each
        request itself through ``request.respond`` (decoupled models). Raising fails every
        request of the batch with the exception's text; the instance stays in service.
        """

    @property
    def runs_now(self) -> bool:
        """True when :meth:`execute_now` would run the next batch on the event loop (a
        cheap model whose calls run inline, see :mod:`despina.models.call_placement`). The default
        scheduler then runs a request that finds the queue empty and this instance idle
        at once, within ``submit``, instead of waking a worker for it."""
        return False

    def execute_now(
        self, requests: Sequence[InferenceRequest]
    ) -> Sequence[InferenceResponse] | None:
        """:meth:`execute`, synchronously on the event loop; called only while
        :attr:`runs_now` is true. Raise :class:`~despina.models.call_placement.NeedsThread` before
        answering any request to have the batch scheduled as usual."""
        raise NeedsThread

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release the instance (on unload and shutdown)."""

    @property
    def healthy(self) -> bool:
        """False while the instance cannot serve (e.g. its process is restarting)."""
        return True

    async def check_ready(self) -> bool:
        """Triton's ``TRITONBACKEND_ModelInstanceReady``: asked at every model readiness
        check (the model-ready endpoints) while the version is READY and every instance
        :attr:`healthy`; False (or an exception) makes the model not ready for that check.
        Keep it cheap: a check waits for it. The default answers True at once."""
        return True


class Backend(abc.ABC):
    """A backend serves the models whose config names it (``backend``) or one of its
    ``platforms``. Subclasses set ``name`` and, to be picked for a folder holding only a
    model file, ``default_model_filename``."""

    name: ClassVar[str]
    platforms: ClassVar[tuple[str, ...]] = ()
    #: File (or folder) name looked for in a version folder, e.g. "model.onnx".
    default_model_filename: ClassVar[str] = ""
    #: Whether a model's instances may be created at once (Triton's backend attribute
    #: ``parallel_instance_loading``): ``create_instance`` calls then overlap.
    parallel_instance_loading: ClassVar[bool] = False

    @classmethod
    def gpu_support(cls) -> str | None:
        """None when the installed framework can run this backend's models on NVIDIA GPUs,
        else why not ("the installed onnxruntime has no CUDA execution provider"); it
        completes "... has kind KIND_GPU but <reason>". Decided without loading CUDA.
        Where it is None, ``KIND_AUTO`` groups go to the GPUs when there are any."""
        return f"the {cls.name} backend runs on CPUs only"

    def __init__(self, context: ModelContext) -> None:
        self.context = context

    async def auto_complete(self) -> None:  # noqa: B027 - optional hook
        """Fill what ``self.context.config`` lacks from the model file, in place: the one
        time a backend may write to a config (the pipeline's draft, before it is frozen)."""

    async def load(self) -> None:  # noqa: B027 - optional hook
        """Load what all instances share (weights); called once before instances."""

    @abc.abstractmethod
    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        """Create one instance; raise to fail the model's load."""

    async def unload(self) -> None:  # noqa: B027 - optional hook
        """Release shared state after every instance closed."""

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """What ``despina plugins`` prints for this backend."""
        return {"name": cls.name, "platforms": list(cls.platforms)}
