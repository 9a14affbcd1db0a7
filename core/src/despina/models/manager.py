"""The model manager: which models are loaded, in which state, and loading/unloading them.

Control modes as tritonserver: ``none`` loads every model at start-up and refuses
load/unload requests; ``explicit`` loads the ``--load-model`` models (``*`` = all) and
serves load/unload requests. Loading a loaded model reloads it: the new versions load
beside the old ones, traffic moves once they are READY, then the old ones drain.

Dependencies: a model uses the composing models of its ensemble (from its config) and the
models it was seen calling through BLS (recorded at run time by
:meth:`ModelManager.record_call`; forgotten when the caller unloads).
``unload(name, unload_dependents=True)`` also unloads, recursively, the models ``name``
uses, except one still used by another loaded model, and (as Triton) a composing model
that was loaded on its own rather than for an ensemble. A BLS callee is always loaded on
its own, so only the first rule protects it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from despina.errors import DespinaError, InvalidArgument, NotFound, Unavailable
from despina.models.instance_update import (
    FilesStamp,
    config_stamp,
    files_stamp,
    updatable,
    update_version,
)
from despina.models.loader import load_version, unload_version
from despina.models.versions import ModelState, ModelVersion, describe, load_failure_text
from despina.repository import config as cfg
from despina.repository.config_pipeline import PreparedConfig, prepare
from despina.repository.folders import (
    ModelRepository,
    missing_specific_versions,
    select_versions,
)
from despina.repository.paths import check_model_name, quote, safe_join
from despina.repository.redact import without_paths
from despina.serving.digits import ascii_digits

if TYPE_CHECKING:
    from despina.models.load_host import LoadHost

log = logging.getLogger("despina.models")

#: The ensemble whose load is running (its scheduler loads missing composing models).
_LOADING_FOR: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "despina_loading_for", default=None
)


class ModelEntry:
    """A model known to the server: its versions, or why it has none."""

    def __init__(self, name: str, model_dir: Path | None = None) -> None:
        self.name = name
        self.model_dir = model_dir
        self.versions: dict[int, ModelVersion] = {}
        self.state = ModelState.LOADING
        self.reason = ""
        #: The model's prepared config, once the config pipeline accepted it.
        self.prepared: PreparedConfig | None = None
        self.temp_dir: Path | None = None
        #: Loaded by name (start-up list, a load request), not for an ensemble that uses it.
        self.explicit = True
        #: The model's files when its config was prepared (None for override files): a
        #: reload that finds them unchanged may be an instance update.
        self.stamp: FilesStamp | None = None
        #: config.pbtxt's modification time then (None: none, or override files).
        self.config_stamp: int | None = None

    @property
    def ready(self) -> bool:
        return any(v.ready for v in self.versions.values())

    @property
    def loaded(self) -> bool:
        """Loading or loaded, not unloaded nor failed."""
        return self.state in (ModelState.READY, ModelState.LOADING)


class ModelManager:
    """Owns every model of one server. All methods run on the server's event loop."""

    def __init__(self, server: LoadHost, repository: ModelRepository) -> None:
        self.server = server
        self.repository = repository
        self.entries: dict[str, ModelEntry] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        #: caller -> the models it was seen calling through BLS (cleared when it unloads).
        self._calls: dict[str, set[str]] = {}
        #: The configs of the models whose versions are loading (not yet in ``entries``).
        self._loading: dict[str, cfg.ModelConfig] = {}
        #: (name, reason) of the ``--load-model`` models no repository holds.
        self._not_found: list[tuple[str, str]] = []

    @property
    def explicit(self) -> bool:
        return str(self.server.settings.model_control_mode) == "explicit"

    async def load_startup(self) -> None:
        """Load the start-up models of the control mode, in parallel. InvalidArgument
        (Triton's text) when ``*`` is given with other ``--load-model`` names; a named
        model no repository holds is logged as Triton logs it and counted in
        :meth:`failures`."""
        names = self.repository.model_names()
        if self.explicit:
            wanted = list(dict.fromkeys(self.server.settings.load_model or []))
            if "*" in wanted and len(wanted) > 1:
                raise InvalidArgument(
                    "Wildcard model name '*' must be the ONLY startup model if specified at all."
                )
            known = set(names)
            names = names if "*" in wanted else [n for n in wanted if n in known]
            for name in wanted:
                if name not in known and name != "*":
                    reason = "model not found in any model repository."
                    log.error("failed to poll model '%s': %s", name, reason)
                    self._not_found.append((name, reason))
        limit = asyncio.Semaphore(max(int(self.server.settings.model_load_thread_count), 1))

        async def one(name: str) -> None:
            async with limit:
                # A failure is recorded on the entry; Server.start applies --exit-on-error.
                with contextlib.suppress(DespinaError):
                    await self.load(name)

        ensembles = [n for n in names if self._is_ensemble(n)]
        await asyncio.gather(*(one(n) for n in names if n not in ensembles))
        await asyncio.gather(*(one(n) for n in ensembles))  # after the models they compose

    def loading(self, name: str) -> bool:
        """Whether a load or unload of ``name`` is under way in this process."""
        lock = self._locks.get(name)
        return lock is not None and lock.locked()

    async def load(
        self,
        name: str,
        config_json: str | bytes | None = None,
        files: Mapping[str, bytes] | None = None,
        before_switch: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Load or reload ``name``; raise the reason if any version fails to load.

        ``config_json`` overrides config.pbtxt; ``files`` (``"1/model.onnx": bytes``)
        replace the model folder with a temporary one (a config is then required).
        A name that cannot be one folder name is refused before anything is read.

        ``before_switch`` (a load every serving process makes together) is awaited once
        the new versions loaded, before they replace the old ones; when it raises, the new
        versions are unloaded, the old ones serve on and its error is the load's. A reload
        is then always a full one (no instance update in place, which could not be undone).
        """
        check_model_name(name)
        async with self._lock(name):
            entry = ModelEntry(name)
            ensemble = _LOADING_FOR.get()
            if ensemble is not None:
                entry.explicit = False
                log.info("loading '%s' for ensemble '%s'", name, ensemble)
            old = self.entries.get(name)
            keep_old = old is not None and old.ready
            if old is not None and keep_old and not (config_json or files) and self._unchanged(old):
                log.info("'%s' is unchanged since it was loaded: nothing to reload", name)
                if before_switch is not None:
                    await before_switch()
                return
            try:
                entry.model_dir = self._model_dir(name, config_json, files, entry)
                updatable_old = old if keep_old and before_switch is None else None
                if await self._load_entry(entry, config_json, updatable_old):
                    return  # an instance update: ``old`` serves on, updated
                failed = [v for v in entry.versions.values() if v.state is not ModelState.READY]
                if failed:
                    raise InvalidArgument(load_failure_text(name, failed))
                if before_switch is not None:
                    try:
                        await before_switch()
                    except DespinaError:
                        await self._retire(entry, drain=False)  # no request reached them
                        raise
            except DespinaError as exc:
                log.error("failed to load '%s': %s", name, exc.status_text)
                roots = self.repository.roots
                without_paths(exc, entry.model_dir or Path(name), roots)
                entry.state, entry.reason = ModelState.UNAVAILABLE, str(exc)
                if keep_old:
                    log.warning("'%s' keeps serving its previous versions", name)
                    await self._retire(entry)
                elif entry.model_dir is not None:  # as Triton: none for a folder not found
                    if old is not None:  # a failed or unloaded entry: its files go
                        await self._retire(old)
                    self.entries[name] = entry
                else:  # nothing to keep, not even the override files written so far
                    await self._retire(entry)
                raise
            self.entries[name] = entry
            if old is not None:
                await self._retire(old)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        """Unload ``name``; with ``unload_dependents`` also the models it uses, by the
        rules in the module docstring. A model that is not loaded is not an error (Triton
        answers OK)."""
        async with self._lock(name):
            entry = self.entries.get(name)
            if entry is None:  # as Triton: unloading a model that is not loaded succeeds
                log.info("unload of '%s': the model is not loaded", name)
                return
            used = self.uses(name)
            called = self._calls.pop(name, set())
            await self._retire(entry)
            entry.state, entry.reason = ModelState.UNAVAILABLE, "unloaded"
        if unload_dependents:
            for other in sorted(used):
                if self._unloads_with(other, name, through_bls=other in called):
                    await self.unload(other, unload_dependents=True)

    def record_call(self, caller: str, callee: str) -> None:
        """Note that model ``caller`` sent a BLS request to ``callee``. On the request
        path: a set lookup, and a log line the first time only."""
        called = self._calls.get(caller)
        if called is None:
            called = self._calls[caller] = set()
        if callee not in called:
            called.add(callee)
            log.info("'%s' calls '%s' through BLS: recorded as a model it uses", caller, callee)

    def uses(self, name: str) -> set[str]:
        """The models ``name`` uses: its ensemble's composing models and its BLS callees."""
        entry = self.entries.get(name)
        used = set(self._calls.get(name, ()))
        if entry is not None and entry.prepared is not None:
            used.update(_composing_models(entry.prepared.config))
        return used

    def composing_models(self, name: str) -> list[str]:
        """The models ensemble ``name`` composes, as its config names them, whether it is
        loading, loaded or failed after its config was read; [] for any other model."""
        config = self._loading.get(name)
        entry = self.entries.get(name)
        if config is None and entry is not None and entry.prepared is not None:
            config = entry.prepared.config
        return _composing_models(config) if config is not None else []

    def _unloads_with(self, name: str, user: str, through_bls: bool) -> bool:
        """Whether ``name``, used by ``user`` being unloaded with its dependents, goes too."""
        entry = self.entries.get(name)
        if entry is None or not entry.loaded:
            return False
        others = sorted(
            n for n, e in self.entries.items() if n != name and e.loaded and name in self.uses(n)
        )
        if others:
            log.info("'%s' stays loaded: used by %s", name, ", ".join(f"'{n}'" for n in others))
            return False
        if entry.explicit and not through_bls:
            log.info("'%s' stays loaded: it was loaded on its own, not for '%s'", name, user)
            return False
        log.info("unloading '%s' with '%s', which used it", name, user)
        return True

    async def unload_all(self) -> None:
        """Unload every model (shutdown): queued requests are answered with an error."""
        await asyncio.gather(*(self._retire(e, drain=False) for e in list(self.entries.values())))

    def _is_ensemble(self, name: str) -> bool:
        """Whether the model's config.pbtxt says ``platform: "ensemble"`` (False if unreadable)."""
        try:
            config, _ = cfg.read_model_config(self.repository.model_dir(name))
        except DespinaError:
            return False
        return bool(config.platform == cfg.ENSEMBLE_PLATFORM)

    def check_control(self) -> None:
        """Raise Unavailable unless the control mode is explicit (Triton's text and code)."""
        if not self.explicit:
            raise Unavailable("explicit model load / unload is not allowed if polling is enabled")

    def get(self, name: str, version: str = "") -> ModelVersion:
        """The READY version to serve; Triton's NotFound/Unavailable texts otherwise, with
        Unavailable (not Triton's NotFound) while a loaded version cannot serve."""
        entry = self.entries.get(name)
        if entry is None:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        if version:
            if not ascii_digits(version):
                raise InvalidArgument(
                    f"failed to get model version from specified version string '{version}' "
                    "(details: stol), version should be an integral value > 0"
                )
            found = entry.versions.get(int(version))
            if found is None:
                raise NotFound(
                    f"Request for unknown model: '{name}' version {version} is not found"
                )
            if not found.ready:
                raise Unavailable(
                    f"Request for unknown model: '{name}' version {version} is not at ready state"
                )
            return found
        for number in sorted(entry.versions, reverse=True):
            if entry.versions[number].ready:
                return entry.versions[number]
        text = f"Request for unknown model: '{name}' has no available versions"
        if any(v.state is ModelState.READY for v in entry.versions.values()):
            raise Unavailable(text)  # loaded, for now unable to serve (instance restarting...)
        raise NotFound(text)  # none loaded: Triton's code

    def find(self, name: str, version: str = "") -> ModelVersion:
        """Like :meth:`get` but also returns versions that are not READY (for metadata)."""
        entry = self.entries.get(name)
        if entry is None or not entry.versions:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        if version:
            found = entry.versions.get(int(version)) if ascii_digits(version) else None
            if found is None:
                raise NotFound(
                    f"Request for unknown model: '{name}' version {version} is not found"
                )
            return found
        return entry.versions[max(entry.versions)]

    def ready_versions(self) -> list[ModelVersion]:
        """Every READY version of every model, by name then version (Triton's order)."""
        return [
            version
            for name in sorted(self.entries)
            for _, version in sorted(self.entries[name].versions.items())
            if version.ready
        ]

    def index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """The repository index: every model folder of the repositories (and its versions)
        with state and reason. As Triton's, it lists folders: a model whose folder was
        removed is not listed, also while it still serves."""
        rows: list[dict[str, Any]] = []
        for name in self.repository.model_names():
            entry = self.entries.get(name)
            if entry is None:
                if not ready_only:
                    rows.append({"name": name})
                continue
            if not entry.versions:
                if not ready_only:
                    rows.append({"name": name, "state": str(entry.state), "reason": entry.reason})
                continue
            rows.extend(
                describe(v) for _, v in sorted(entry.versions.items()) if v.ready or not ready_only
            )
        return rows

    def all_ready(self) -> bool:
        """True when every model the server tried to load has a READY version or was
        unloaded (Triton's strict readiness: a version not ready because it was unloaded
        does not count against the server), or is an ensemble with a step on a model
        that was unloaded (Triton unloads it until that model loads again)."""
        return all(
            e.ready or _unloaded(e) or self._lost_a_step(e)
            for e in self.entries.values()
            if e.state is not ModelState.UNAVAILABLE or e.versions
        )

    def _lost_a_step(self, entry: ModelEntry, seen: frozenset[str] = frozenset()) -> bool:
        """Whether ``entry`` is an ensemble with a step on a model that was unloaded,
        directly or through an inner ensemble (``seen``: the ensembles on the way, so a
        circular one that failed to load ends the search)."""
        if entry.prepared is None or entry.name in seen:
            return False
        seen |= {entry.name}
        steps = (self.entries.get(n) for n in _composing_models(entry.prepared.config))
        return any(
            step is not None and (step.reason == "unloaded" or self._lost_a_step(step, seen))
            for step in steps
        )

    def failures(self) -> list[tuple[str, str]]:
        """(model, reason) of every model or version that failed to load, and of every
        start-up model not found."""
        failed = list(self._not_found)
        failed += [(e.name, e.reason) for e in self.entries.values() if e.reason and not e.versions]
        failed += [
            (v.name, v.reason)
            for e in self.entries.values()
            for v in e.versions.values()
            if v.state is ModelState.UNAVAILABLE and v.reason != "unloaded"
        ]
        return failed

    def _unchanged(self, entry: ModelEntry) -> bool:
        """Whether ``entry``'s folder is the model's folder still and nothing in it (its
        config.pbtxt included) changed since it was loaded: Triton then takes a load
        request without overrides as done, keeping the model (and a config a previous
        request gave) as it is."""
        try:
            model_dir = self.repository.model_dir(entry.name)
        except DespinaError:
            return False
        return (
            entry.stamp is not None
            and entry.model_dir == model_dir
            and entry.config_stamp == config_stamp(model_dir)
            and entry.stamp == files_stamp(model_dir)
        )

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    def _model_dir(
        self,
        name: str,
        config_json: str | bytes | None,
        files: Mapping[str, bytes] | None,
        entry: ModelEntry,
    ) -> Path:
        if not files:
            return self.repository.model_dir(name)
        if config_json is None:
            raise InvalidArgument(
                f"failed to load '{name}', failed to poll from model repository "
                "(file overrides need the config parameter too)"
            )
        temp = Path(tempfile.mkdtemp(prefix="despina-override-"))
        entry.temp_dir = temp
        model_dir = temp / name
        model_dir.mkdir()
        for relative, content in files.items():
            try:  # as Triton, the text begins "failed to load"
                target = safe_join(model_dir, relative, "file override path")
            except InvalidArgument as exc:
                raise InvalidArgument(f"failed to load '{name}': {exc}") from None
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
            except OSError as exc:  # a path naming a folder, or a file where a folder goes
                raise InvalidArgument(
                    f"failed to load '{name}': invalid file override path "
                    f"'{quote(relative)}': {exc.strerror}"
                ) from None
        return model_dir

    async def _load_entry(
        self, entry: ModelEntry, config_json: str | bytes | None, serving: ModelEntry | None
    ) -> bool:
        """Prepare ``entry``'s config and load its versions; or, when ``serving`` (the
        READY entry of the same model) differs only in its instance groups, update
        ``serving``'s instances instead (:mod:`despina.models.instance_update`) and
        return True (``entry`` is then not used)."""
        assert entry.model_dir is not None
        name = entry.name
        prepared = await prepare(self.server, entry.model_dir, config_json, entry.name)
        entry.model_dir, entry.prepared = prepared.model_dir, prepared
        if entry.temp_dir is None:
            entry.stamp = files_stamp(prepared.model_dir)
            entry.config_stamp = config_stamp(prepared.model_dir)
        ensemble = prepared.config.platform == cfg.ENSEMBLE_PLATFORM
        versions = list(prepared.versions) or ([1] if ensemble else [])
        selected = select_versions(prepared.config, versions)
        for version in missing_specific_versions(prepared.config, versions):
            log.error(
                "version %d is specified for model '%s', but the version directory is not present",
                version,
                name,
            )
        if not selected:
            raise InvalidArgument(  # Triton's code and text (its VersionsToLoad)
                f"at least one version must be available under the version policy of model '{name}'"
            )
        if serving is not None and await self._update(serving, entry, selected):
            return True
        entry.versions = {v: ModelVersion(name, v, prepared.config) for v in selected}
        token = _LOADING_FOR.set(name if ensemble else None)
        self._loading[name] = prepared.config
        try:
            await asyncio.gather(
                *(load_version(self.server, prepared, v) for v in entry.versions.values())
            )
        finally:
            _LOADING_FOR.reset(token)
            del self._loading[name]
        entry.state = ModelState.READY if entry.ready else ModelState.UNAVAILABLE
        return False

    async def _update(self, serving: ModelEntry, entry: ModelEntry, selected: list[int]) -> bool:
        """Update the instances of every version of ``serving`` to ``entry``'s config
        when only its instance groups changed (same files, same versions); whether it
        did. A version whose scheduler cannot hand over (a sequence in flight) before any
        was updated makes it a full reload; after, that version serves on as it was."""
        prepared = entry.prepared
        assert prepared is not None
        if (
            serving.prepared is None
            or entry.stamp is None
            or serving.stamp != entry.stamp
            or serving.model_dir != entry.model_dir
            or sorted(serving.versions) != sorted(selected)
            or not all(v.state is ModelState.READY for v in serving.versions.values())
            or not updatable(serving.prepared.config, prepared.config)
        ):
            return False
        updated = 0
        for number, version in sorted(serving.versions.items()):
            done = await update_version(
                self.server,
                version,
                prepared.config,
                prepared.model_dir,
                functools.partial(serving.versions.__setitem__, number),
            )
            if done is None and not updated:
                return False
            if done is None:
                log.warning(
                    "'%s' version %d keeps its instances: a sequence is in flight",
                    entry.name,
                    number,
                )
            updated += done is not None
        serving.prepared, serving.explicit = prepared, entry.explicit
        serving.config_stamp = entry.config_stamp
        return True

    async def _retire(self, entry: ModelEntry, drain: bool = True) -> None:
        await asyncio.gather(
            *(
                unload_version(v, drain)
                for v in entry.versions.values()
                if v.state is ModelState.READY
            )
        )
        if entry.prepared is not None and entry.prepared.changed():
            log.error(
                "model '%s': its config was written to after it was prepared; configs are "
                "read-only once loaded (a backend or scheduler broke the contract)",
                entry.name,
            )
        if entry.temp_dir is not None:
            shutil.rmtree(entry.temp_dir, ignore_errors=True)
            entry.temp_dir = None


def _composing_models(config: cfg.ModelConfig) -> list[str]:
    return [step.model_name for step in config.ensemble_scheduling.step]


def _unloaded(entry: ModelEntry) -> bool:
    """Whether every version of ``entry`` is UNAVAILABLE because it was unloaded."""
    return bool(entry.versions) and all(
        v.state is ModelState.UNAVAILABLE and v.reason == "unloaded"
        for v in entry.versions.values()
    )
