"""The in-process server: :class:`Server` over a Despina server, and the
:class:`ModelDictionary` ``Server.models()`` returns."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tritonserver._enums import MetricFormat
from tritonserver._errors import (
    InternalError,
    InvalidArgumentError,
    UnavailableError,
    UnsupportedError,
)
from tritonserver._model import Model
from tritonserver._options import Options, local_repositories, serve_args
from tritonserver._running import RunningServer

#: Model states that count as unloaded.
_UNLOADED_STATES = (None, "UNAVAILABLE")
#: ``load()`` parameters naming a file to put in the model's directory start with this.
_FILE_PREFIX = "file:"


class ModelDictionary(dict[tuple[str, int], Model]):
    """Models by (name, version); a bare name gives the model at version -1."""

    def __init__(self, server: Server, models: list[Model]) -> None:
        super().__init__()
        for model in models:
            self[(model.name, model.version)] = model
        self._server = server
        self._names = {name for name, _ in self}

    def __getitem__(self, key: tuple[str, int] | str) -> Model:
        if isinstance(key, tuple):
            try:
                return dict.__getitem__(self, key)
            except KeyError:
                raise KeyError(f"Unknown Model: {key}") from None
        if key in self._names:
            return Model(self._server, name=key, version=-1)
        raise KeyError(f"Unknown Model: {key}")


class Server:
    """An in-process server. Made from :class:`Options` (or their keywords), checked and
    started by :meth:`start`; methods other than start raise InvalidArgumentError before."""

    def __init__(self, options: Options | None = None, **kwargs: Any) -> None:
        self.options: Options = options if options is not None else Options(**kwargs)
        self._running: RunningServer | None = None

    def _started(self) -> RunningServer:
        if self._running is None:
            raise InvalidArgumentError("Server not started")
        return self._running

    def start(
        self,
        wait_until_ready: bool = False,
        polling_interval: float = 0.1,
        timeout: float | None = None,
    ) -> Server:
        """Start the server and load its models (by the control mode). TypeError and
        InvalidArgumentError for bad options, InternalError when it cannot start,
        UnavailableError when not ready within ``timeout`` (with ``wait_until_ready``)."""
        if self._running is not None:
            raise InvalidArgumentError("Server already started")
        args = serve_args(self.options)
        for path in local_repositories(self.options):
            if not Path(path).expanduser().is_dir():
                raise InternalError(f"failed to stat file {path}")
        self._running = RunningServer(args)
        started = time.monotonic()
        while wait_until_ready and not self.ready():
            if timeout is not None and time.monotonic() - started >= timeout:
                raise UnavailableError("Timeout before ready")
            time.sleep(polling_interval)
        return self

    def stop(self) -> None:
        """Stop the server: requests accepted finish (within the exit timeout), models
        unload."""
        self._started().stop()
        self._running = None

    def metadata(self) -> dict[str, Any]:
        """``{"name", "version", "extensions"}`` (``version``: Despina's)."""
        running = self._started()
        return running.run(running.host.server_metadata)

    def live(self) -> bool:
        running = self._started()
        return running.run(lambda: running.host.live)

    def ready(self) -> bool:
        """Triton's readiness: with ``strict_readiness``, every READY model's own check
        (a Python model's ``is_ready()``) is asked too."""
        running = self._started()
        return running.call(running.server.ready_checked())

    def model(self, model_name: str, model_version: int = -1) -> Model:
        """The model ``model_name`` (checked when used)."""
        return Model(self, model_name, model_version)

    def models(self, exclude_not_ready: bool = False) -> ModelDictionary:
        """Every model of the repositories, by (name, version), with its state."""
        running = self._started()
        rows = running.run(running.host.repository_index, exclude_not_ready)
        models = [
            Model(
                self,
                row["name"],
                int(row.get("version", -1)),
                row.get("state"),
                row.get("reason"),
            )
            for row in rows
        ]
        return ModelDictionary(self, models)

    def load(self, model_name: str, parameters: dict[str, str | bytes] | None = None) -> Model:
        """Load (or reload) a model, explicit control mode only, and wait until it is
        done. ``parameters``: ``"config"`` (JSON) replaces its configuration,
        ``"file:<path>"`` (bytes) its files."""
        running = self._started()
        parameters = parameters or {}
        config = parameters.get("config")
        files = {
            key.removeprefix(_FILE_PREFIX): value
            for key, value in parameters.items()
            if key.startswith(_FILE_PREFIX) and isinstance(value, bytes)
        }
        if config is not None and not isinstance(config, str):
            raise InvalidArgumentError("load parameter 'config' must be a JSON string")
        running.call(running.host.load(model_name, config, files))
        return self.model(model_name)

    def unload(
        self,
        model: str | Model,
        unload_dependents: bool = False,
        wait_until_unloaded: bool = False,
        polling_interval: float = 0.1,
        timeout: float | None = None,
    ) -> None:
        """Unload a model (and, with ``unload_dependents``, the ensembles using it);
        ``wait_until_unloaded``: until every version of it is UNAVAILABLE."""
        running = self._started()
        name = model.name if isinstance(model, Model) else model
        running.call(running.host.unload(name, unload_dependents))
        started = time.monotonic()
        while wait_until_unloaded and not self._unloaded(name):
            if timeout is not None and time.monotonic() - started >= timeout:
                return
            time.sleep(polling_interval)

    def _unloaded(self, name: str) -> bool:
        return all(
            model.state in _UNLOADED_STATES
            for (model_name, _), model in dict.items(self.models())
            if model_name == name
        )

    def metrics(self, metric_format: MetricFormat = MetricFormat.PROMETHEUS) -> str:
        """The server's metrics in Prometheus' text format, the page Triton's ``/metrics``
        serves ("" with ``Options.metrics`` false). UnsupportedError without
        despina-metrics-prometheus, InvalidArgumentError for another format."""
        running = self._started()
        if metric_format != MetricFormat.PROMETHEUS:
            raise InvalidArgumentError(f"unknown metric format '{metric_format}'")
        try:
            from despina_metrics_prometheus import metrics_page
        except ImportError:
            raise UnsupportedError(
                "Server.metrics() needs despina-metrics-prometheus "
                "(pip install 'despina-tritonserver-api[frontends]')"
            ) from None
        page = running.run(metrics_page, running.host)
        return "" if page is None else page.joined().decode()

    def poll_model_repository(self) -> None:
        """Apply the repository's changes now (POLL control mode): new model folders
        load, changed ones reload, removed ones unload. UnavailableError in other modes."""
        running = self._started()
        poller = running.server.poller
        if poller is None:
            raise UnavailableError("polling is disabled")

        async def poll_now() -> None:
            # A poll acts on a folder seen unchanged by the poll before it: the second
            # of two takes every folder as it is now, as Triton's explicit poll does.
            await poller.poll_once()
            await poller.poll_once()

        running.call(poll_now())

    def register_model_repository(
        self, repository_path: str, name_mapping: dict[str, str] | None = None
    ) -> None:
        """Serve the model folders of ``repository_path`` as well (EXPLICIT control mode),
        ``name_mapping`` (``{folder name: model name}``) renaming those it names.
        InvalidArgumentError for a path that is not a repository or two folders given one
        name, AlreadyExistsError for a path or name registered already,
        UnsupportedError in other control modes."""
        running = self._started()
        by_name: dict[str, str] = {}
        for folder, name in (name_mapping or {}).items():
            if not isinstance(name, str):
                raise InvalidArgumentError(
                    f"Mapped model name must be a string, found another type for {folder}"
                )
            if by_name.setdefault(name, folder) != folder:
                raise InvalidArgumentError(
                    f"failed to register '{repository_path}', there is a conflicting "
                    f"mapping for '{name}'"
                )
        running.run(running.host.register_model_repository, repository_path, by_name)

    def unregister_model_repository(self, repository_path: str) -> None:
        """Forget a repository :meth:`register_model_repository` added (its loaded models
        stay loaded); InvalidArgumentError for one not registered."""
        running = self._started()
        running.run(running.host.unregister_model_repository, repository_path)
