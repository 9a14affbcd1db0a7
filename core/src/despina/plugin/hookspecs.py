"""The plugin contract: every hook Despina calls, one documented function each.

Hooks wire objects together at start-up and model load; none runs per request.
Capability hooks (``despina_backends``, ``despina_schedulers``, ...) return classes; the
core indexes them by their ``name`` and refuses two plugins claiming one name. Contracts
only grow: new arguments may be added, existing ones are never renamed.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from despina.inference.response_cache import ResponseCache
    from despina.memory.gpus import GpuInventory
    from despina.plugin.backend import Backend
    from despina.plugin.ports import (
        Frontend,
        FrontendHost,
        MetricsExporter,
        RepositoryAgent,
        RepositorySource,
        ServingProcessesPart,
    )
    from despina.scheduling.base import Scheduler
    from despina.serving.settings import Stash

PROJECT = "despina"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec(historic=True)
def despina_addoption(parser: argparse.ArgumentParser) -> None:
    """Add command-line flags (``parser.add_argument``) for ``despina serve``.

    Called once per parser, for every plugin, including plugins registered later
    (historic). Flags that tritonserver also has must keep tritonserver's name, type and
    default. Return nothing.
    """


@hookspec(historic=True)
def despina_configure(settings: argparse.Namespace, stash: Stash) -> None:
    """Read this plugin's flags from the parsed command line, once, before the server starts.

    Called once per server, before any model loads. ``settings`` holds every flag of every
    plugin; read your own into a frozen options object and store it in ``stash`` under a
    :class:`despina.serving.settings.StashKey` your plugin owns: your frontend, exporter, backend
    or repository source reads it from there (its host's ``stash``), never a flag name.
    Raise ``ValueError`` for an invalid value or combination of flags; the message is
    shown to the user. Return nothing.
    """


@hookspec
def despina_backends() -> list[type[Backend]]:
    """Return the :class:`despina.plugin.backend.Backend` classes this plugin provides.

    Called once per server at start-up. Each class has a unique ``name`` (the config's
    ``backend`` field) and the ``platforms`` it serves. Results of all plugins are merged.
    """
    raise NotImplementedError


@hookspec
def despina_schedulers() -> list[type[Scheduler]]:
    """Return :class:`despina.scheduling.base.Scheduler` classes.

    Called once per server. Each class has a unique ``name`` and a ``handles(config)``
    class method; the core picks, per model, the one scheduler that handles its config,
    else the scheduler named "default".
    """
    raise NotImplementedError


@hookspec
def despina_response_caches() -> list[type[ResponseCache]]:
    """Return response cache classes (:class:`despina.plugin.ports.ResponseCache`), each
    with a unique ``name``: the ``<name>`` of ``--cache-config <name>,<key>=<value>``.

    Called once per server. The one cache the flags name is made as ``Cache(options)``
    (a ValueError refuses the start-up with its message), ``await start()`` before the
    models load, ``await stop()`` after they unload; the request pipeline calls
    ``lookup`` and ``insert`` for the models whose config enables ``response_cache``.
    The core provides "local".
    """
    raise NotImplementedError


@hookspec
def despina_frontends() -> list[type[Frontend]]:
    """Return frontend classes (:class:`despina.plugin.ports.Frontend`): ``Frontend(host)``
    where ``host`` is the server's :class:`despina.plugin.ports.FrontendHost` (its data plane).

    Called once per server; every returned class is instantiated and started after the
    models load (a frontend disabled by its flags starts nothing). ``name`` must be unique.
    ``drain()`` is called as the server begins to stop, before the models unload: stop
    accepting connections and close the open ones gracefully; ``settled`` (False while the
    frontend holds requests received before the stop that it has not answered, perhaps not
    yet submitted) is waited for with the models' queues, within ``--exit-timeout-secs``;
    ``stop()`` follows once the models are unloaded.
    """
    raise NotImplementedError


@hookspec
def despina_repository_sources() -> list[type[RepositorySource]]:
    """Return repository source classes (:class:`despina.plugin.ports.RepositorySource`),
    each with ``schemes`` (e.g. ``("s3",)``).

    Called once per server. A source turns a repository URL into a local folder:
    ``Source(url, stash)`` (the server's :class:`despina.serving.settings.Stash`) once per ``--model-repository`` URL of its scheme, then
    ``await source.localize() -> pathlib.Path`` at start-up and before every poll (it
    re-syncs the local copy). Plain paths need no source.
    """
    raise NotImplementedError


@hookspec
def despina_repository_agents() -> list[type[RepositoryAgent]]:
    """Return repository agent classes (:class:`despina.plugin.ports.RepositoryAgent`), each
    with a unique ``name``.

    Called once per server. An agent named in a model's ``model_repository_agents`` runs,
    in config order, before that model loads: ``await Agent(params).prepare(model_dir)``
    may check or rewrite files and returns the folder to load from; raising fails the load.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def despina_gpu_inventory(min_compute_capability: float) -> GpuInventory | None:
    """Return the GPUs this server may place instances on, or None to leave it to others.

    Called once per server at start-up; the first non-None answer wins, and without one
    the core asks NVML (``nvidia-ml-py``) or counts device nodes, honouring
    ``CUDA_VISIBLE_DEVICES`` (:func:`despina.memory.gpus.discover`). For a host whose devices
    those cannot see, and for tests that simulate an inventory.
    """


@hookspec
def despina_metrics_exporters() -> list[type[MetricsExporter]]:
    """Return metrics exporter classes (:class:`despina.plugin.ports.MetricsExporter`), each
    with a unique ``name``.

    Called once per server. ``Exporter(host)`` with async ``start()``/``stop()``, where
    ``host`` is the server's :class:`despina.plugin.ports.MetricsHost`; it reads statistics at
    scrape time (no per-request work).
    """
    raise NotImplementedError


@hookspec
def despina_http_routes(host: FrontendHost) -> list[Any]:
    """Return routes to serve on the HTTP frontend's port, beside the v2 routes.

    Called once per HTTP listener (``despina serve``'s port, a Ray Serve replica...) as
    it starts; ``host`` is the server's :class:`despina.plugin.ports.FrontendHost`. Each item is
    a ``despina_frontend_http.Route`` (method, path pattern, async handler taking a
    ``despina_frontend_http.Request``, restricted-API group); declared here so that a
    plugin needs no import of the HTTP frontend to implement it. A route whose method
    and pattern an earlier route has is an error naming both plugins.
    """
    raise NotImplementedError


@hookspec
def despina_server_started(server: FrontendHost) -> None:
    """Called once after the models loaded and every frontend started; ``server`` is
    the server's :class:`despina.plugin.ports.FrontendHost` (its data plane)."""


@hookspec
def despina_server_stopping(server: FrontendHost) -> None:
    """Called once when shutdown begins, before frontends stop and models unload;
    ``server`` as for :func:`despina_server_started`."""


@hookspec
def despina_serving_processes(flags: argparse.Namespace, count: int) -> ServingProcessesPart | None:
    """What this plugin needs of ``despina serve --serving-processes count`` (count > 1).

    Called once, in the supervising process, before any serving process starts; ``flags``
    is the parsed command line. Raise ``ValueError`` to refuse a flag that cannot work
    across processes (name the flag and ``--serving-processes`` in the message, which is
    shown to the user). Return a :class:`despina.plugin.ports.ServingProcessesPart` (the
    flags each serving process gets on top of the command line, and a service the
    supervisor runs), or None when nothing is needed.
    """
    raise NotImplementedError
