"""The serving event loop: asyncio's unless ``DESPINA_EVENT_LOOP=uvloop``, the same for
``despina serve`` and for the test harness, which serves real requests on it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from despina.serving.event_loop import ENV, loop_class, new_event_loop

uvloop = pytest.importorskip("uvloop")


def test_asyncio_by_default_and_uvloop_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert loop_class() is None
    loop = new_event_loop()
    try:
        assert isinstance(loop, asyncio.BaseEventLoop) and not isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    monkeypatch.setenv(ENV, "UVLoop ")
    assert loop_class() is uvloop.Loop
    monkeypatch.setenv(ENV, "asyncio")
    assert loop_class() is None


def test_an_unknown_choice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "trio")
    with pytest.raises(ValueError, match="DESPINA_EVENT_LOOP must be 'uvloop' or 'asyncio'"):
        loop_class()


def test_the_harness_serves_on_the_serving_loop(
    model_repository: Any, despina_server: Any, http_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "uvloop")
    running = despina_server(model_repository.root)
    assert isinstance(running.loop, uvloop.Loop)
    assert http_client(running).is_server_ready()
