"""Loading and unloading one model version: backend, instances, warm-up, scheduler.

:func:`load_version` is the whole load of one version from its prepared config
(:mod:`despina.repository.config_pipeline`); :func:`unload_version` the whole unload. The model
manager (``models.py``) decides what to load and when.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from despina.errors import ConfigError, DespinaError, Internal, Unavailable
from despina.inference.stats import LATENCY_OBSERVERS
from despina.inference.validation import ModelSignature
from despina.models.versions import ModelState, ModelVersion
from despina.models.warmup import warm_up
from despina.plugin.backend import InstanceSpec, ModelContext
from despina.repository import config as cfg, instance_groups
from despina.repository.redact import without_paths
from despina.scheduling.base import ScheduledModel, Scheduler
from despina.scheduling.rate_limiter import Needs
from despina.scheduling.routed_sequences import RoutedSequences

if TYPE_CHECKING:
    from pathlib import Path

    from despina.models.load_host import LoadHost
    from despina.repository.config_pipeline import PreparedConfig

log = logging.getLogger("despina.models")


def pick_scheduler(server: LoadHost, config: cfg.ModelConfig) -> type[Scheduler]:
    """The single scheduler that handles ``config``, else "default"."""
    schedulers: dict[str, type[Scheduler]] = server.registry.schedulers
    chosen = [cls for cls in schedulers.values() if cls.handles(config)]
    if len(chosen) > 1:
        names = ", ".join(sorted(c.name for c in chosen))
        raise ConfigError(f"model '{config.name}': several schedulers claim it: {names}")
    if chosen:
        return chosen[0]
    if config.platform == cfg.ENSEMBLE_PLATFORM or config.HasField("sequence_batching"):
        needed = "ensemble" if config.platform == cfg.ENSEMBLE_PLATFORM else "sequence batching"
        raise Unavailable(
            f"model '{config.name}' needs {needed}, which no installed scheduler provides"
        )
    if "default" not in schedulers:
        raise Unavailable("no default scheduler is installed")
    return schedulers["default"]


def rate_limiter_needs(
    server: LoadHost, config: cfg.ModelConfig, specs: list[InstanceSpec]
) -> list[Needs | None]:
    """Each instance's rate-limiter needs (None when not limited), registered with the
    server's limiter; empty without ``--rate-limit=execution_count``."""
    if server.rate_limiter is None:
        return []
    needs: list[Needs | None] = []
    try:
        for spec in specs:
            group = config.instance_group[spec.group_index]
            if not group.HasField("rate_limiter") or not group.rate_limiter.resources:
                needs.append(None)
                continue
            resources = {
                (r.name, None if getattr(r, "global") else spec.device_id): int(r.count)
                for r in group.rate_limiter.resources
            }
            one = Needs(resources, int(group.rate_limiter.priority) or 1)
            server.rate_limiter.register(one)
            needs.append(one)
    except DespinaError:  # one refused: none of this model's stays registered
        for registered in needs:
            if registered is not None:
                server.rate_limiter.release(registered)
        raise
    return needs


def make_scheduler(
    server: LoadHost, version: ModelVersion, model_dir: Path, specs: list[InstanceSpec]
) -> Scheduler:
    """The scheduler of ``version``, whose instances (made from ``specs``) exist, not
    started yet (a sequence-batched model's, in one of several serving processes,
    wrapped to run each sequence in its owner); sets the version's signature and its
    latency observers."""
    scheduler_cls = pick_scheduler(server, version.config)
    version.signature = ModelSignature(version.name, version.config)
    model = ScheduledModel(
        version.name,
        str(version.version),
        version.config,
        version.instances,
        version.stats,
        host=server.scheduler_host,
        model_dir=model_dir,
        cache=server.response_cache if version.config.response_cache.enable else None,
        limiter=server.rate_limiter,
        needs=rate_limiter_needs(server, version.config, specs),
        max_pending=server.settings.max_pending_requests,
    )
    stash = server.backend_host.stash
    if LATENCY_OBSERVERS in stash:
        version.stats.latency = stash[LATENCY_OBSERVERS].for_model(
            version.name, str(version.version), version.config
        )
    scheduler = scheduler_cls(model)
    router = server.sequence_router
    if router is not None and version.config.HasField("sequence_batching"):
        return RoutedSequences(scheduler, router)
    return scheduler


async def load_version(server: LoadHost, prepared: PreparedConfig, version: ModelVersion) -> None:
    """Load one version of the model ``prepared`` describes, tried again up to
    ``--model-load-retry-count`` times after a failure; if all fail it ends UNAVAILABLE
    with the last reason, which names no server path
    (:func:`~despina.repository.redact.without_paths`); never raises."""
    retries = max(server.settings.model_load_retry_count, 0)
    for attempt in range(retries + 1):
        if attempt:
            log.info("retrying to load '%s' version %d", version.name, version.version)
            version.state, version.reason = ModelState.LOADING, ""
        await _load_once(server, prepared, version)
        if version.state is ModelState.READY:
            return


async def _load_once(server: LoadHost, prepared: PreparedConfig, version: ModelVersion) -> None:
    model_dir = prepared.model_dir
    started = time.monotonic_ns()
    specs: list[InstanceSpec] = []
    try:
        if prepared.backend is not None:
            context = ModelContext(
                version.name,
                version.version,
                model_dir,
                version.config,
                server.backend_host,
                runtime_dir=prepared.runtime_dir,
            )
            version.backend = prepared.backend(context)
            await version.backend.load()
            specs = instance_groups.instance_specs(version.config)
            await _create_instances(version, specs)
            await warm_up(version.config, model_dir, version.instances)
        version.scheduler = make_scheduler(server, version, model_dir, specs)
        await version.scheduler.start()
    except Exception as exc:  # noqa: BLE001 - any load failure makes the version unavailable
        error = exc if isinstance(exc, DespinaError) else Internal(f"{type(exc).__name__}: {exc}")
        roots = server.models.repository.roots
        version.reason = without_paths(error, model_dir, roots).status_text
        version.state = ModelState.UNAVAILABLE
        log.error(
            "failed to load '%s' version %d: %s", version.name, version.version, version.reason
        )
        await _release(version)
        return
    version.stats.load_ns = time.monotonic_ns() - started
    version.state = ModelState.READY
    log.info(
        "successfully loaded '%s' version %d in %.0f ms",
        version.name,
        version.version,
        version.stats.load_ns / 1e6,
    )


async def _create_instances(version: ModelVersion, specs: list[InstanceSpec]) -> None:
    """Add the instances of ``specs`` to ``version``, in their order: created all at once
    where its backend sets ``parallel_instance_loading`` (as Triton), else one after
    another. Raises the first failure, with the instances made added (to be closed)."""
    backend = version.backend
    assert backend is not None
    if not backend.parallel_instance_loading:
        for spec in specs:
            version.instances.append(await backend.create_instance(spec))
        return
    made = await asyncio.gather(
        *(backend.create_instance(spec) for spec in specs), return_exceptions=True
    )
    version.instances.extend(m for m in made if not isinstance(m, BaseException))
    for outcome in made:
        if isinstance(outcome, BaseException):
            raise outcome


async def unload_version(version: ModelVersion, drain: bool = True) -> None:
    """Stop taking requests, close instances and the backend; ends UNAVAILABLE.

    With ``drain`` every accepted request is executed first (unload, reload); without it
    (shutdown) queued requests are answered with an error and only running ones finish.
    """
    started = time.monotonic()
    version.state = ModelState.UNLOADING
    if version.scheduler is not None:
        if drain:
            await version.scheduler.drain()
        await version.scheduler.stop()
    await _release(version)
    version.state = ModelState.UNAVAILABLE
    version.reason = "unloaded"
    log.info(
        "successfully unloaded '%s' version %d in %.0f ms",
        version.name,
        version.version,
        (time.monotonic() - started) * 1000,
    )


async def _release(version: ModelVersion) -> None:
    if version.scheduler is not None:
        version.scheduler.model.release_needs()
    for instance in version.instances:
        try:
            await instance.close()
        except Exception:
            log.exception("closing an instance of '%s' failed", version.name)
    version.instances.clear()
    if version.backend is not None:
        try:
            await version.backend.unload()
        except Exception:
            log.exception("unloading backend of '%s' failed", version.name)
        version.backend = None
