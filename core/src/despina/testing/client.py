"""A numpy-speaking model client for tests of backend plugins, over the real HTTP client.

``ModelClient(running)`` wraps ``tritonclient.http`` for a server started by the
``despina_server`` fixture: requests are dicts of numpy arrays, answers dicts of numpy
arrays (or the ``InferenceServerException`` a failed request raised).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from despina.testing.server import RunningServer


class ModelClient:
    """A client of one running server's models over HTTP (the real ``tritonclient.http``),
    speaking numpy: infer, infer_many, config, index, stats. ``client`` is the underlying
    ``tritonclient.http.InferenceServerClient``."""

    def __init__(self, running: RunningServer) -> None:
        self.running = running
        self.server = running.server
        self.client = httpclient.InferenceServerClient(running.http_url, concurrency=16)

    def close(self) -> None:
        self.client.close()

    def infer(
        self, model: str, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Outputs of one request; raises InferenceServerException for a failed one."""
        infer_inputs, requested = self._request(inputs, outputs)
        result = self.client.infer(model, infer_inputs, outputs=requested)
        return self._outputs(result)

    def infer_many(self, model: str, requests: Sequence[dict[str, np.ndarray]]) -> list[Any]:
        """Send every request at once; return outputs, or the exception, per request."""
        pending = [self.client.async_infer(model, self._request(r, None)[0]) for r in requests]
        results: list[Any] = []
        for item in pending:
            try:
                results.append(self._outputs(item.get_result()))
            except InferenceServerException as exc:
                results.append(exc)
        return results

    def config(self, model: str) -> dict[str, Any]:
        return dict(self.client.get_model_config(model))

    def index(self) -> dict[str, dict[str, Any]]:
        return {row["name"]: row for row in self.client.get_model_repository_index()}

    def stats(self, model: str) -> dict[str, Any]:
        return dict(self.client.get_inference_statistics(model)["model_stats"][0])

    @staticmethod
    def _request(
        inputs: dict[str, np.ndarray], outputs: Sequence[str] | None
    ) -> tuple[list[Any], list[Any] | None]:
        infer_inputs = []
        for name, array in inputs.items():
            item = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            item.set_data_from_numpy(array, binary_data=True)
            infer_inputs.append(item)
        requested = (
            None if outputs is None else [httpclient.InferRequestedOutput(n) for n in outputs]
        )
        return infer_inputs, requested

    @staticmethod
    def _outputs(result: Any) -> dict[str, np.ndarray]:
        names = [o["name"] for o in result.get_response()["outputs"]]
        return {name: result.as_numpy(name) for name in names}
