"""Fixtures of the PyTorch backend's tests: models scripted, exported and written by the
tests, and a model client over HTTP."""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable

import pytest
import torch


class AddSub(torch.nn.Module):
    """(a + b, a - b)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


class Words(torch.nn.Module):
    """Gives back its list of strings."""

    def forward(self, words: list[str]) -> list[str]:
        return list(words)


class Upper(torch.nn.Module):
    def forward(self, words: list[str]) -> list[str]:
        return [w.upper() for w in words]


class Picky(torch.nn.Module):
    """Doubles x; raises for negative values (a run-time rejection)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x < 0).any()):
            raise ValueError("negative values are not allowed")
        return x * 2


class RunningSum(torch.nn.Module):
    """A sequence's running sum of x, kept in the sequence batcher's implicit state."""

    def forward(
        self, x: torch.Tensor, start: torch.Tensor, corrid: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        total = x + state * (1 - start)
        return total, total


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
    """Builders: ``add_sub``, ``identity``, ``upper``, ``running_sum`` (TorchScript) and
    ``add_sub_pt2`` (torch.export). The conformance suite (test_conformance.py) uses the modules directly."""
    return {
        "add_sub": lambda: scripted(AddSub()),
        "identity": lambda: scripted(Identity()),
        "upper": lambda: scripted(Upper()),
        "running_sum": lambda: scripted(RunningSum()),
        "add_sub_pt2": lambda dynamic_batch=True: exported(
            AddSub(), (torch.ones(2, 4), torch.ones(2, 4)), dynamic_batch
        ),
    }
