"""The builtin schedulers, registered through the ``despina`` entry-point group."""

from __future__ import annotations

from despina.plugin.hookspecs import hookimpl
from despina.scheduling.base import Scheduler
from despina.scheduling.default_scheduler import DefaultScheduler
from despina.scheduling.dynamic import DynamicBatchScheduler
from despina.scheduling.ensemble import EnsembleScheduler
from despina.scheduling.sequence import SequenceBatchScheduler


@hookimpl
def despina_schedulers() -> list[type[Scheduler]]:
    return [DefaultScheduler, DynamicBatchScheduler, SequenceBatchScheduler, EnsembleScheduler]
