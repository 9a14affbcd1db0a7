"""Fixtures of the PyTorch backend's tests: models scripted, exported and written by the
tests, and a model client over HTTP."""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient
from despina.testing import RunningServer
from tritonclient.utils import InferenceServerException, np_to_triton_dtype


class AddSub(torch.nn.Module):
    """(a + b, a - b)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


class Upper(torch.nn.Module):
    def forward(self, words: list[str]) -> list[str]:
        return [w.upper() for w in words]


class Picky(torch.nn.Module):
    """Doubles x; raises for negative values (a run-time rejection)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x < 0).any()):
            raise ValueError("negative values are not allowed")
        return x * 2


def scripted(module: torch.nn.Module) -> bytes:
    """A TorchScript file's bytes (torch.jit.script, deprecated in torch 2.10+, still works)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(module), buffer)
    return buffer.getvalue()


def exported(module: torch.nn.Module, args: tuple[torch.Tensor, ...], dynamic_batch: bool) -> bytes:
    """A torch.export program's bytes, with a dynamic first dimension when asked."""
    dynamic = None
    if dynamic_batch:
        batch = torch.export.Dim("batch", max=1024)
        dynamic = tuple({0: batch} for _ in args)
    program = torch.export.export(module, args, dynamic_shapes=dynamic)
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue()


@pytest.fixture
def torch_models() -> dict[str, Callable[..., bytes]]:
    """Builders: ``add_sub``, ``identity``, ``upper``, ``picky`` (TorchScript) and
    ``add_sub_pt2`` (torch.export)."""
    return {
        "add_sub": lambda: scripted(AddSub()),
        "identity": lambda: scripted(Identity()),
        "upper": lambda: scripted(Upper()),
        "picky": lambda: scripted(Picky()),
        "add_sub_pt2": lambda dynamic_batch=True: exported(
            AddSub(), (torch.ones(2, 4), torch.ones(2, 4)), dynamic_batch
        ),
    }


class ServedModels:
    """A model client over HTTP (the real ``tritonclient.http``): infer, config, index, stats."""

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


@pytest.fixture
def served() -> Iterator[Callable[[RunningServer], ServedModels]]:
    """Factory: ``served(running)`` -> an HTTP client of that server's models."""
    clients: list[ServedModels] = []

    def factory(running: RunningServer) -> ServedModels:
        clients.append(ServedModels(running))
        return clients[-1]

    yield factory
    for client in clients:
        client.close()
