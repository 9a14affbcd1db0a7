"""Instance updates: a loaded model whose config changed only in ``instance_group`` keeps
serving, as in Triton, instead of being reloaded.

Triton reloads a model whose config changed anywhere but in ``instance_group`` (or whose
files changed); when only the groups changed, it keeps the model and every instance whose
group is the same but for ``name`` and ``count``, creates the instances the new groups add
and closes the ones they no longer have. Requests keep running on the kept instances
meanwhile: adding an instance never waits for a running execution, and a running
execution never waits for a new instance to initialize.

:func:`updatable` says whether a reload may be an update; :func:`update_version` makes
one version's update. The model manager (:mod:`despina.models.manager`) decides.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from despina.models.loader import make_scheduler
from despina.models.versions import ModelState, ModelVersion
from despina.models.warmup import warm_up
from despina.plugin.backend import InstanceSpec, ModelInstance
from despina.repository import config as cfg, instance_groups

if TYPE_CHECKING:
    from despina.models.load_host import LoadHost

log = logging.getLogger("despina.models")

#: A model's files as an update compares them: relative path -> modification time (ns).
FilesStamp = dict[str, int]


def files_stamp(model_dir: Path) -> FilesStamp:
    """The modification time of every file and folder under ``model_dir`` but its
    ``config.pbtxt`` (Triton's timestamps of a model's version folders and other files):
    a model whose stamp changed is reloaded in full. Unreadable entries are left out."""
    stamp: FilesStamp = {}
    for folder, folders, files in os.walk(model_dir):
        for name in (*folders, *files):
            path = Path(folder, name)
            relative = str(path.relative_to(model_dir))
            if relative == cfg.CONFIG_FILENAME:
                continue
            try:
                stamp[relative] = path.stat().st_mtime_ns
            except OSError:
                continue
    return stamp


def config_stamp(model_dir: Path) -> int | None:
    """The modification time (ns) of ``model_dir``'s config.pbtxt; None without one."""
    try:
        return (model_dir / cfg.CONFIG_FILENAME).stat().st_mtime_ns
    except OSError:
        return None


def updatable(old: cfg.ModelConfig, new: cfg.ModelConfig) -> bool:
    """Whether ``new`` differs from ``old`` in nothing but ``instance_group`` (an
    ensemble has no instances to update)."""
    if new.platform == cfg.ENSEMBLE_PLATFORM:
        return False
    return bool(_without_groups(old) == _without_groups(new))


def _without_groups(config: cfg.ModelConfig) -> cfg.ModelConfig:
    copied = cfg.ModelConfig()
    copied.CopyFrom(config)
    del copied.instance_group[:]
    return copied


def _signature(config: cfg.ModelConfig, spec: InstanceSpec) -> tuple[bytes, int]:
    """What makes two instances the same: their group but for ``name`` and ``count``
    (Triton's instance signature), and their device."""
    group = cfg.mc.ModelInstanceGroup()
    group.CopyFrom(config.instance_group[spec.group_index])
    group.name, group.count = "", 1
    return group.SerializeToString(deterministic=True), spec.device_id


async def update_version(
    server: LoadHost,
    old: ModelVersion,
    config: cfg.ModelConfig,
    model_dir: Path,
    serve: Callable[[ModelVersion], None],
) -> ModelVersion | None:
    """The version that replaces READY ``old`` under ``config`` (which :func:`updatable`
    accepted): ``old``'s backend and kept instances, the instances ``config`` adds
    (created while ``old`` serves) and a new scheduler, started, that ``old``'s scheduler
    handed its queue over to; ``serve(version)`` puts it in ``old``'s place, at once,
    before anything is handed over. ``old`` ends UNAVAILABLE, owning nothing; the
    instances ``config`` drops are closed once their running executions end.

    None, with ``old`` serving as before, when ``old``'s scheduler cannot hand over now
    (a sequence in flight): the caller reloads in full. Raises what creating an instance
    raised (``old`` serving as before)."""
    backend, scheduler = old.backend, old.scheduler
    assert backend is not None and scheduler is not None
    new_specs = instance_groups.instance_specs(config)
    by_signature: dict[tuple[bytes, int], list[int]] = {}
    for index, spec in enumerate(instance_groups.instance_specs(old.config)):
        by_signature.setdefault(_signature(old.config, spec), []).append(index)
    kept: dict[int, int] = {}  # new index -> old index
    for new_index, spec in enumerate(new_specs):
        same = by_signature.get(_signature(config, spec))
        if same:
            kept[new_index] = same.pop(0)
    dropped = [index for indices in by_signature.values() for index in indices]
    backend.context.config = config  # the groups new specs index (frozen: replaced, not written)
    added: list[ModelInstance] = []
    version = ModelVersion(old.name, old.version, config)
    version.stats, version.backend = old.stats, backend
    try:
        specs = [spec for index, spec in enumerate(new_specs) if index not in kept]
        added = await _create(backend.create_instance, specs)
        await warm_up(config, model_dir, added)
        fresh = iter(added)
        version.instances = [
            old.instances[kept[i]] if i in kept else next(fresh) for i in range(len(new_specs))
        ]
        successor = make_scheduler(server, version, model_dir, new_specs)
        if not scheduler.can_hand_over(successor):
            successor.model.release_needs()
            raise _Declined
    except BaseException as exc:
        backend.context.config = old.config
        await _close(added, old.name)
        if isinstance(exc, _Declined):
            return None
        raise
    version.scheduler = successor
    version.state = ModelState.READY
    serve(version)  # requests now go to ``version``
    old.state, old.reason = ModelState.UNAVAILABLE, "unloaded"
    busy = await scheduler.hand_over(successor)
    scheduler.model.release_needs()
    successor.model.busy_until = {new: busy[was] for new, was in kept.items() if was in busy}
    await successor.start()
    log.info(
        "updated the instances of '%s' version %d: %d kept, %d added, %d removed",
        old.name,
        old.version,
        len(kept),
        len(added),
        len(dropped),
    )
    for index in dropped:
        if index in busy:
            await busy[index]
    await _close([old.instances[i] for i in dropped], old.name)
    old.instances, old.backend, old.scheduler = [], None, None
    return version


class _Declined(Exception):
    """The serving scheduler cannot hand over now."""


async def _create(
    create: Callable[[InstanceSpec], Awaitable[ModelInstance]], specs: Sequence[InstanceSpec]
) -> list[ModelInstance]:
    """Instances for ``specs``, one after another; when one fails, those made are closed
    and the failure raised."""
    made: list[ModelInstance] = []
    try:
        for spec in specs:
            made.append(await create(spec))
    except BaseException:
        await _close(made, "")
        raise
    return made


async def _close(instances: Sequence[ModelInstance], model: str) -> None:
    for instance in instances:
        try:
            await instance.close()
        except Exception:
            log.exception("closing an instance of '%s' failed", model)
