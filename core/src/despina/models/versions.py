"""A model version's state as the server reports it: :class:`ModelVersion`, its
:class:`ModelState`, the repository index entry (:func:`describe`) and Triton's text for a
load whose versions failed (:func:`load_failure_text`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from despina.inference.stats import ModelStats
from despina.inference.validation import ModelSignature
from despina.plugin.backend import Backend, ModelInstance
from despina.repository import config as cfg
from despina.repository.folders import version_failures_text
from despina.scheduling.base import Scheduler

#: Reason shown for a loaded version that cannot serve right now.
NOT_SERVING = "loaded but not ready: an instance is restarting or a composing model is unavailable"


class ModelState(enum.StrEnum):
    """Triton's model states as the repository index reports them."""

    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"


@dataclass
class ModelVersion:
    """One version of a model: its config and, once loaded, what serves it.

    ``config`` is the model's prepared config (:mod:`despina.repository.config_pipeline`), shared by
    its versions: read it, never write it.
    """

    name: str
    version: int
    config: cfg.ModelConfig
    state: ModelState = ModelState.LOADING
    reason: str = ""
    backend: Backend | None = None
    instances: list[ModelInstance] = field(default_factory=list)
    scheduler: Scheduler | None = None
    signature: ModelSignature | None = None
    stats: ModelStats = field(init=False)

    def __post_init__(self) -> None:
        self.stats = ModelStats(self.name, str(self.version))

    @property
    def ready(self) -> bool:
        """READY and every instance healthy (a restarting instance makes it not ready)."""
        return (
            self.state is ModelState.READY
            and all(i.healthy for i in self.instances)
            and (self.scheduler is None or self.scheduler.ready)
        )

    @property
    def device_inputs(self) -> bool:
        """Whether every instance takes device inputs (an ensemble, with none, does: its
        steps' models decide)."""
        return all(i.device_inputs for i in self.instances)

    @property
    def decoupled(self) -> bool:
        return bool(self.config.model_transaction_policy.decoupled)


def describe(version: ModelVersion) -> dict[str, Any]:
    """The repository index entry of a version; a loaded version that cannot serve (an
    instance restarting, a composing model gone) shows as UNAVAILABLE with why."""
    state, reason = str(version.state), version.reason
    if version.state is ModelState.READY and not version.ready:
        state, reason = str(ModelState.UNAVAILABLE), NOT_SERVING
    return {"name": version.name, "version": str(version.version), "state": state, "reason": reason}


def load_failure_text(name: str, failed: list[ModelVersion]) -> str:
    """Triton's text for a load of ``name`` whose ``failed`` versions did not load."""
    return version_failures_text(name, [(v.version, str(v.state), v.reason) for v in failed])
