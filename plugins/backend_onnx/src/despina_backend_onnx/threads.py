"""The process-wide onnxruntime thread pool (``--backend-config=onnxruntime,thread-pool=shared``).

onnxruntime can give its environment global intra- and inter-op pools once per process;
sessions built with ``use_per_session_threads = False`` run on them, and from then on no
session of the process may have pools of its own (onnxruntime refuses). Sized to the cores
this process may use, the shared pool gives one request every core, whichever instance runs
it, and lets concurrent requests share those cores instead of each instance's pool
competing for them.
"""

from __future__ import annotations

import logging
import threading

from despina import ConfigError, cores

log = logging.getLogger("despina.onnxruntime")

#: ``--backend-config=onnxruntime,thread-pool=<mode>``.
THREAD_POOL_KEY = "thread-pool"
SHARED, PER_SESSION = "shared", "per-session"

_lock = threading.Lock()
_created = False


def wants_shared(value: str | None) -> bool:
    """Whether a ``thread-pool`` backend setting asks for the shared pool (default: no)."""
    if value in (None, "", PER_SESSION):
        return False
    if value == SHARED:
        return True
    raise ConfigError(
        f"--backend-config=onnxruntime,{THREAD_POOL_KEY}={value}: expected '{SHARED}' or "
        f"'{PER_SESSION}'"
    )


def shared_pool() -> None:
    """Create the process's global pools (intra- and inter-op: a thread per core) unless
    they exist; pools another part of the process created are used as they are."""
    global _created
    with _lock:
        if _created:
            return
        from onnxruntime.capi import _pybind_state

        try:
            _pybind_state.set_global_thread_pool_sizes(cores(), cores())
        except Exception as exc:
            if "already been created" not in str(exc):
                raise
            log.info("onnxruntime sessions use the process's existing global thread pools")
        else:
            log.info("onnxruntime sessions share one pool of %d threads", cores())
        _created = True
