"""The exporter tests' server: the toy model on loopback, with the given flags."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import toy_backend
from despina.testing import RepositoryBuilder, RunningServer

from .helpers import LOOPBACK, TOY


@pytest.fixture
def serve(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> Callable[..., RunningServer]:
    """``serve(*flags)``: a server of model ``toy`` (failing negative inputs)."""
    model_repository.add("toy", TOY, {"1/model.toy": '{"reject_negative": true}'})

    def start(*args: str) -> RunningServer:
        return despina_server(model_repository.root, args=[*LOOPBACK, *args], plugins=[toy_backend])

    return start
