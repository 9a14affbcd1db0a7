"""Plugin manager: entry-point group ``despina``, in-process plugins, capability indexes.

Each :class:`~despina.serving.server.Server` owns one :class:`Plugins`. Entry points load in our
own loop: a plugin that fails to import is recorded (distribution, version, error) and
reported, and the server starts without it. Capability hooks are indexed by name; two
plugins claiming one name is an error naming both distributions.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pluggy

from despina.plugin import hookspecs

log = logging.getLogger("despina.plugins")

ENTRY_POINT_GROUP = "despina"

#: Capability hook -> the word ``despina plugins`` uses for it.
CAPABILITY_HOOKS: dict[str, str] = {
    "despina_backends": "backends",
    "despina_schedulers": "schedulers",
    "despina_response_caches": "response caches",
    "despina_frontends": "frontends",
    "despina_repository_sources": "repository sources",
    "despina_repository_agents": "repository agents",
    "despina_metrics_exporters": "metrics",
}


class PluginError(Exception):
    """Plugins conflict (two claim one name) or a hook is misspelled."""


@dataclass(frozen=True)
class PluginOrigin:
    """Where a plugin came from: entry-point name, distribution and version."""

    name: str
    distribution: str
    version: str


@dataclass(frozen=True)
class PluginFailure:
    """An entry point that could not be imported, or whose capability hook raised."""

    origin: PluginOrigin
    error: str
    #: "import", or the name of the capability hook that raised.
    stage: str = "import"

    def describe(self) -> str:
        o = self.origin
        what = "to import" if self.stage == "import" else f"in its {self.stage} hook"
        return f"plugin '{o.name}' from {o.distribution} {o.version} failed {what}: {self.error}"


@dataclass
class Plugins:
    """A pluggy manager plus the origins of its plugins and the failed entry points."""

    manager: pluggy.PluginManager
    origins: dict[int, PluginOrigin] = field(default_factory=dict)
    failures: list[PluginFailure] = field(default_factory=list)

    @property
    def hook(self) -> Any:
        return self.manager.hook

    def register(self, plugin: object, origin: PluginOrigin) -> None:
        """Register a plugin object (module or instance) unless already registered."""
        if self.manager.is_registered(plugin):
            return
        self.manager.register(plugin, name=origin.name)
        self.origins[id(plugin)] = origin

    def origin_of(self, plugin: object) -> PluginOrigin:
        return self.origins.get(id(plugin), PluginOrigin(str(plugin), "<in-process>", ""))

    def capabilities(self, hook_name: str) -> dict[str, tuple[type[Any], PluginOrigin]]:
        """Call a capability hook and index the classes by ``name``.

        Raises PluginError when two plugins claim one name, naming both distributions.
        """
        index: dict[str, tuple[type[Any], PluginOrigin]] = {}
        caller = getattr(self.hook, hook_name)
        for impl in caller.get_hookimpls():
            origin = self.origin_of(impl.plugin)
            for cls in self._provided(impl.plugin, impl.function, hook_name):
                name = cls.name
                if name in index and index[name][0] is not cls:
                    other = index[name][1]
                    raise PluginError(
                        f"{CAPABILITY_HOOKS[hook_name]} name '{name}' is claimed by both "
                        f"{other.distribution} ({other.name}) and "
                        f"{origin.distribution} ({origin.name})"
                    )
                index[name] = (cls, origin)
        return index

    def _provided(
        self, plugin: object, function: Callable[[], Any], hook_name: str
    ) -> list[type[Any]]:
        """The classes ``plugin``'s capability hook ``function`` returns; a hook that raises
        (a lazy import of a broken module) is recorded as the plugin's failure, giving none."""
        try:
            return list(function() or [])
        except Exception as exc:  # noqa: BLE001 - a broken plugin never stops the server
            origin = self.origin_of(plugin)
            failure = PluginFailure(origin, f"{type(exc).__name__}: {exc}", hook_name)
            if failure not in self.failures:
                self.failures.append(failure)
                log.warning("%s; continuing without it", failure.describe())
            return []

    def contributions(self, hook_name: str, **kwargs: Any) -> list[tuple[Any, PluginOrigin]]:
        """Every item the plugins' ``hook_name`` implementations return (each a list),
        with the plugin it came from, in call order; a hook that raises is recorded as
        its plugin's failure and gives none."""
        caller = getattr(self.hook, hook_name)
        items: list[tuple[Any, PluginOrigin]] = []
        for impl in reversed(caller.get_hookimpls()):  # pluggy's call order
            given = {name: kwargs[name] for name in impl.argnames}
            call = functools.partial(impl.function, **given)
            origin = self.origin_of(impl.plugin)
            items += [(item, origin) for item in self._provided(impl.plugin, call, hook_name)]
        return items

    def failure_for(self, name: str) -> PluginFailure | None:
        """The import failure of the entry point called ``name``, if any."""
        return next((f for f in self.failures if f.origin.name == name), None)

    def describe(self) -> list[dict[str, Any]]:
        """Every plugin with its distribution, version and capabilities (for listings)."""
        rows: list[dict[str, Any]] = []
        for name, plugin in self.manager.list_name_plugin():
            origin = self.origin_of(plugin)
            provides: dict[str, list[str]] = {}
            for hook_name, word in CAPABILITY_HOOKS.items():
                function = getattr(plugin, hook_name, None)
                if function is not None:
                    provided = self._provided(plugin, function, hook_name)
                    provides[word] = sorted(cls.name for cls in provided)
            rows.append(
                {
                    "name": name,
                    "distribution": origin.distribution,
                    "version": origin.version,
                    "provides": provides,
                }
            )
        rows.extend(
            {
                "name": f.origin.name,
                "distribution": f.origin.distribution,
                "version": f.origin.version,
                "error": f.error,
            }
            for f in self.failures
        )
        return rows


def create_plugins(plugins: Sequence[object] = (), load_entrypoints: bool = True) -> Plugins:
    """A new plugin manager with the entry-point plugins (unless disabled) and ``plugins``.

    Misspelled hooks (``despina_*`` functions matching no spec) raise PluginError.
    """
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    result = Plugins(manager)
    if load_entrypoints:
        _load_entry_points(result, importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    for plugin in plugins:
        result.register(plugin, PluginOrigin(_plugin_name(plugin), "<in-process>", ""))
    try:
        manager.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(str(exc)) from None
    return result


def _load_entry_points(result: Plugins, entry_points: Iterable[Any]) -> None:
    for ep in sorted(entry_points, key=lambda e: e.name):
        dist = ep.dist
        origin = PluginOrigin(
            ep.name,
            dist.metadata["Name"] if dist is not None else "<unknown>",
            dist.version if dist is not None else "",
        )
        try:
            plugin = ep.load()
        except Exception as exc:  # noqa: BLE001 - any import failure is reported, not fatal
            failure = PluginFailure(origin, f"{type(exc).__name__}: {exc}")
            result.failures.append(failure)
            log.warning("%s; continuing without it", failure.describe())
            continue
        result.register(plugin, origin)


def _plugin_name(plugin: object) -> str:
    return str(getattr(plugin, "__name__", None) or type(plugin).__name__)
