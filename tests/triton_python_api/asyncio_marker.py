"""A pytest plugin for Triton's test files: runs a coroutine test marked ``asyncio`` on a
new event loop (``asyncio.run``), which is what those files ask pytest-asyncio for. The
runner loads it (``-p asyncio_marker``) only where pytest-asyncio is not installed."""

from __future__ import annotations

import asyncio
import inspect

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "asyncio: run the coroutine test on a new event loop")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    test = pyfuncitem.obj
    if pyfuncitem.get_closest_marker("asyncio") is None or not inspect.iscoroutinefunction(test):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    asyncio.run(test(**{name: pyfuncitem.funcargs[name] for name in names}))
    return True
