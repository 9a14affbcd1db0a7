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
        """Not provided: start ``tritonfrontend.Metrics`` over the server and scrape it."""
        raise UnsupportedError(
            "Server.metrics() is not provided by Despina's tritonserver API: start "
            "tritonfrontend.Metrics over the server and read its /metrics"
        )

    def poll_model_repository(self) -> None:
        """Not provided: Despina polls by itself in POLL control mode."""
        raise UnsupportedError(
            "poll_model_repository() is not provided by Despina's tritonserver API: "
            "ModelControlMode.POLL polls the repository by itself"
        )

    def register_model_repository(
        self, repository_path: str, name_mapping: dict[str, str] | None = None
    ) -> None:
        """Not provided: give every repository in Options.model_repository."""
        raise UnsupportedError("register_model_repository() is not provided by Despina")

    def unregister_model_repository(self, repository_path: str) -> None:
        """Not provided: give every repository in Options.model_repository."""
        raise UnsupportedError("unregister_model_repository() is not provided by Despina")
