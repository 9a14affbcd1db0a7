"""The builtin schedulers, registered through the ``despina`` entry-point group."""

from __future__ import annotations

from despina.hookspecs import hookimpl
from despina.scheduling.base import Scheduler
from despina.scheduling.dynamic import DynamicBatchScheduler
from despina.scheduling.ensemble import EnsembleScheduler
from despina.scheduling.sequence import SequenceBatchScheduler
from despina.scheduling.workers import DefaultScheduler


@hookimpl
def despina_schedulers() -> list[type[Scheduler]]:
    return [DefaultScheduler, DynamicBatchScheduler, SequenceBatchScheduler, EnsembleScheduler]
