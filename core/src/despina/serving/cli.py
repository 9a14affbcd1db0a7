"""``despina serve`` (a tritonserver command line) and ``despina plugins``.

Importing this module, building the parser and listing plugins import no ML framework:
backends import theirs only when they load a model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from despina.memory.cuda_memory import probe_cuda
from despina.memory.gpus import DEFAULT_MIN_COMPUTE_CAPABILITY, discover
from despina.plugin.manager import Plugins, create_plugins
from despina.plugin.registry import Registry
from despina.serving.busy_poll import loop_factory
from despina.serving.flags import (
    build_serve_parser,
    parse_settings,
    plugin_modules,
    serving_processes_asked,
)
from despina.serving.peers import Peers
from despina.serving.sequence_routing import SequenceRouter
from despina.serving.serving_processes import ServingProcess
from despina.version import __version__

if TYPE_CHECKING:
    from despina.serving.server import Server

log = logging.getLogger("despina")

#: The one install that adds the HTTP and gRPC frontends, metrics and the Python backend.
SERVE_INSTALL = "pip install 'despina[serve]'"


def configure_logging(log_file: str | None = None, log_format: str = "default") -> None:
    """Triton-like log lines on stderr (or ``--log-file``), in ``--log-format``."""
    handler: logging.Handler
    handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler()
    if log_format == "ISO8601":
        fmt = "%(asctime)s %(levelname).1s %(process)d %(filename)s:%(lineno)d] %(message)s"
        handler.setFormatter(logging.Formatter(fmt, "%Y-%m-%dT%H:%M:%SZ"))
    else:
        fmt = "%(levelname).1s%(asctime)s %(process)d %(filename)s:%(lineno)d] %(message)s"
        handler.setFormatter(logging.Formatter(fmt, "%m%d %H:%M:%S"))
    root = logging.getLogger("despina")
    root.handlers[:] = [handler]
    root.propagate = False


def print_model_table(server: object) -> None:
    """Triton's start-up table of models and their states."""
    rows = server.models.index()  # type: ignore[attr-defined]
    width = max([len(r["name"]) for r in rows] + [5])
    lines = [f"{'Model':<{width}} | Version | Status"]
    for row in rows:
        state = row.get("state", "")
        if row.get("reason") and state != "READY":
            state = f"{state}: {row['reason']}"
        lines.append(f"{row['name']:<{width}} | {row.get('version', ''):<7} | {state}")
    log.info("\n%s", "\n".join(lines))


def startup_warnings(server: Server) -> list[str]:
    """What ``despina serve`` warns of as it starts, beside each flag without effect: no
    protocol frontend installed (nothing outside the process can reach the server), and no
    model repository (the bundled examples are the default only in a source checkout)."""
    warnings = []
    if not server.registry.frontends:
        warnings.append(
            "no protocol frontend is installed (no HTTP, gRPC or OpenAI port will listen): "
            "this server can only be used in-process; "
            f"{SERVE_INSTALL} adds the HTTP and gRPC frontends, metrics and the Python backend"
        )
    if not server.settings.model_repository:
        warnings.append(
            "no model repository given: serving no models; pass --model-repository PATH "
            "(examples/model_repository is the default only in a source checkout of Despina)"
        )
    return warnings


def cmd_serve(argv: Sequence[str]) -> int:
    from despina.serving.server import Server, StartupError

    place = ServingProcess.from_env()
    if place is None and serving_processes_asked(argv) > 1:
        return cmd_supervise(argv)
    try:
        server = Server.from_args(argv)
    except StartupError as exc:
        configure_logging()
        log.error("%s", exc)
        return 1
    settings = server.settings
    configure_logging(settings.log_file, settings.log_format)
    for warning in settings.inert_flags_given:
        log.warning("flag has no effect: %s", warning)
    for warning in settings.flag_warnings:  # tritonserver's own: plain lines on stderr
        print(f"Warning: {warning}", file=sys.stderr, flush=True)
    for failure in server.plugins.failures:
        log.warning("%s", failure.describe())
    for warning in startup_warnings(server):
        log.warning("%s", warning)

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        peers = router = None
        if place is not None:
            peers = server.peers = Peers(place, server.peer_operations)
            router = server.sequence_router = SequenceRouter(place, server.submit_forwarded)
        try:
            if not await start_unless_stopped(server, stop):
                return 0
        except StartupError as exc:
            log.error("%s", exc)
            return 1
        print_model_table(server)
        if peers is not None and router is not None:
            await peers.start()
            await router.start()
        try:
            await stop.wait()
        finally:
            log.info("shutting down")
            await server.shutdown()
            if peers is not None and router is not None:
                await peers.stop()
                await router.stop()
        return 0

    with asyncio.Runner(loop_factory=loop_factory(settings.busy_poll_us)) as runner:
        return runner.run(run())


async def start_unless_stopped(server: Server, stop: asyncio.Event) -> bool:
    """Start ``server``; True once started. A stop signal (``stop`` set) while it starts,
    e.g. while a large repository loads, ends the start: the loads still running are
    cancelled, what was loaded is stopped, and False is returned. (Triton's process, whose
    signal handler comes only after the start, dies of the signal then.) StartupError as
    :meth:`Server.start` raises it."""
    starting = asyncio.ensure_future(server.start())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((starting, stopping), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if starting.done():
        starting.result()
        return True
    log.info("shutting down before the start finished")
    starting.cancel()
    await asyncio.gather(starting, return_exceptions=True)
    await server.stop()
    return False


def cmd_supervise(argv: Sequence[str]) -> int:
    """``despina serve --serving-processes N`` with N > 1: supervise N serving processes
    (:mod:`despina.serving.supervisor`)."""
    from despina.serving.runtime_settings import LogSettings
    from despina.serving.settings import CoreSettings
    from despina.serving.supervisor import supervise

    plugins = create_plugins(plugin_modules(argv))
    flags = parse_settings(list(argv), plugins)
    configure_logging(flags.log_file, flags.log_format)
    LogSettings.from_settings(CoreSettings.from_namespace(flags))  # the levels
    return supervise(argv, flags, plugins)


def cmd_plugins(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="despina plugins", description="List installed plugins.")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="also list the GPUs instances may use and whether each backend can run on them "
        "(imports the backends' frameworks)",
    )
    options = parser.parse_args(list(argv))
    plugins = create_plugins()
    rows = plugins.describe()
    gpu = gpu_report(plugins) if options.gpu else None
    if options.json:
        print(json.dumps({"plugins": rows, "gpu": gpu} if gpu else rows, indent=2))
        return 0
    if gpu is not None:
        print(gpu["devices"])
        print(f"  device tensors and CUDA shared memory: {gpu['cuda']}")
        for name, support in gpu["backends"].items():
            print(f"  backend {name}: {support}")
    for row in rows:
        head = f"{row['name']}  ({row['distribution']} {row['version']})"
        if "error" in row:
            print(f"{head}  FAILED: {row['error']}")
            continue
        provides = "; ".join(f"{k}: {', '.join(v)}" for k, v in row["provides"].items() if v)
        print(f"{head}  {provides}")
    return 0


def gpu_report(plugins: Plugins) -> dict[str, Any]:
    """The GPU inventory (as ``despina serve`` finds it with default flags), whether this
    process can hold device tensors and open CUDA IPC regions (cupy and a device: it
    initialises CUDA), and, per installed backend, "can run on GPUs" or why not."""
    inventory = (
        plugins.hook.despina_gpu_inventory(min_compute_capability=DEFAULT_MIN_COMPUTE_CAPABILITY)
        or discover()
    )
    backends: dict[str, str] = {}
    for name, cls in sorted(Registry.build(plugins).backends.items()):
        try:
            backends[name] = cls.gpu_support() or "can run on GPUs"
        except Exception as exc:  # noqa: BLE001 - a broken framework is reported, not raised
            backends[name] = f"cannot tell: {type(exc).__name__}: {exc}"
    cuda = probe_cuda()
    usable = f"usable on {cuda.devices} CUDA device(s)" if cuda.available else cuda.reason
    return {"devices": inventory.describe(), "cuda": usable, "backends": backends}


USAGE = f"""usage: despina [--version] COMMAND [ARGS]

Despina {__version__}: a Triton-compatible model inference server in Python.

commands:
  serve     serve a model repository (takes tritonserver's flags; see below)
  plugins   list installed plugins, their distributions and what they provide

"""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``despina`` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        parser, _ = build_serve_parser(create_plugins())
        print(USAGE + parser.format_help())
        return 0 if args else 2
    if args[0] == "--version":
        print(f"despina {__version__}")
        return 0
    command, rest = args[0], args[1:]
    if command == "serve":
        return cmd_serve(rest)
    if command == "plugins":
        return cmd_plugins(rest)
    print(f"despina: unknown command '{command}'\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
