"""The capability classes the installed plugins provide, indexed by name once per server."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping

    from despina.inference.response_cache import ResponseCache
    from despina.plugin.backend import Backend
    from despina.plugin.ports import Frontend, MetricsExporter, RepositoryAgent, RepositorySource
    from despina.scheduling.base import Scheduler


class Capabilities(Protocol):
    """What the registry reads of the plugin manager (:class:`despina.plugin.manager.Plugins`)."""

    def capabilities(self, hook_name: str) -> Mapping[str, tuple[type[Any], Any]]: ...


@dataclass
class Registry:
    """The capability classes of the installed plugins, by name."""

    backends: dict[str, type[Backend]] = field(default_factory=dict)
    schedulers: dict[str, type[Scheduler]] = field(default_factory=dict)
    frontends: dict[str, type[Frontend]] = field(default_factory=dict)
    exporters: dict[str, type[MetricsExporter]] = field(default_factory=dict)
    agents: dict[str, type[RepositoryAgent]] = field(default_factory=dict)
    sources: dict[str, type[RepositorySource]] = field(default_factory=dict)
    caches: dict[str, type[ResponseCache]] = field(default_factory=dict)

    @classmethod
    def build(cls, plugins: Capabilities) -> Registry:
        def names(hook: str) -> dict[str, type[Any]]:
            return {name: c for name, (c, _) in plugins.capabilities(hook).items()}

        return cls(
            backends=names("despina_backends"),
            schedulers=names("despina_schedulers"),
            frontends=names("despina_frontends"),
            exporters=names("despina_metrics_exporters"),
            agents=names("despina_repository_agents"),
            sources=names("despina_repository_sources"),
            caches=names("despina_response_caches"),
        )
