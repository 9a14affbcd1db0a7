"""A model of a started server: :class:`Model` (inference, metadata, configuration,
readiness, statistics)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from despina import to_json_dict

from tritonserver._enums import ModelBatchFlag, ModelTxnPropertyFlag
from tritonserver._model_ref import ServerRef
from tritonserver._request import InferenceRequest
from tritonserver._response import AsyncResponseIterator, ResponseIterator

if TYPE_CHECKING:
    from tritonserver._running import RunningServer


class Model:
    """A model (``version`` -1: the one its version policy picks). Made by
    ``Server.model()`` / ``Server.models()``; checked when used, not when made."""

    def __init__(
        self,
        server: ServerRef,
        name: str,
        version: int = -1,
        state: str | None = None,
        reason: str | None = None,
    ) -> None:
        """InvalidArgumentError when ``server`` is not started."""
        self._running: RunningServer = server._started()
        self._owner = server
        self.name = name
        self.version = version
        self.state = state
        self.reason = reason

    def _answered_by(self, version: int) -> Model:
        """This model at the version that answered a request."""
        return Model(self._owner, self.name, version) if version != self.version else self

    @property
    def _version_text(self) -> str:
        return "" if self.version < 0 else str(self.version)

    def create_request(self, **kwargs: Any) -> InferenceRequest:
        """A request to this model (keyword arguments: :class:`InferenceRequest`'s)."""
        kwargs.pop("model", None)
        return InferenceRequest(model=self, **kwargs)

    def infer(
        self,
        inference_request: InferenceRequest | None = None,
        raise_on_error: bool = True,
        **kwargs: Any,
    ) -> ResponseIterator:
        """Send a request (or one made from ``kwargs``); iterate the responses. Raises
        InvalidArgumentError (and the server's other errors) for a request it refuses;
        ``raise_on_error``: a response's error is raised by the iterator."""
        request = inference_request or InferenceRequest(model=self, **kwargs)
        return ResponseIterator(self, request._to_despina(), request, raise_on_error)

    def async_infer(
        self,
        inference_request: InferenceRequest | None = None,
        raise_on_error: bool = True,
        **kwargs: Any,
    ) -> AsyncResponseIterator:
        """:meth:`infer` for asyncio: call it on a running loop, ``async for`` the responses."""
        request = inference_request or InferenceRequest(model=self, **kwargs)
        return AsyncResponseIterator(self, request._to_despina(), request, raise_on_error)

    def metadata(self) -> dict[str, Any]:
        """KServe v2 model metadata: name, versions, platform, inputs, outputs."""
        return self._running.run(self._running.host.model_metadata, self.name, self._version_text)

    def ready(self) -> bool:
        """Whether the model is READY and its instances' own checks (a Python model's
        ``is_ready()``) answer True."""
        return self._running.call(
            self._running.host.model_ready_checked(self.name, self._version_text)
        )

    def config(self, config_version: int = 1) -> dict[str, Any]:
        """The complete model configuration as Triton's JSON (``config_version``: 1 only)."""
        config = self._running.run(self._running.host.model_config, self.name, self._version_text)
        return to_json_dict(config)

    def batch_properties(self) -> ModelBatchFlag:
        """FIRST_DIM for a model that batches (``max_batch_size`` > 0), else UNKNOWN."""
        config = self._running.run(self._running.host.model_config, self.name, self._version_text)
        return ModelBatchFlag.FIRST_DIM if config.max_batch_size > 0 else ModelBatchFlag.UNKNOWN

    def transaction_properties(self) -> ModelTxnPropertyFlag:
        """DECOUPLED for a decoupled model, else ONE_TO_ONE."""
        config = self._running.run(self._running.host.model_config, self.name, self._version_text)
        decoupled = config.model_transaction_policy.decoupled
        return ModelTxnPropertyFlag.DECOUPLED if decoupled else ModelTxnPropertyFlag.ONE_TO_ONE

    def statistics(self) -> dict[str, Any]:
        """``{"model_stats": [...]}``, Triton's statistics of the model's ready versions."""
        stats = self._running.run(self._running.host.statistics, self.name, self._version_text)
        return {"model_stats": stats}

    def __repr__(self) -> str:
        return str(self)

    def __str__(self) -> str:
        return str({"name": self.name, "version": self.version, "state": self.state})
