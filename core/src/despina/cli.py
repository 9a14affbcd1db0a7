"""``despina serve`` (a tritonserver command line) and ``despina plugins``.

Importing this module, building the parser and listing plugins import no ML framework:
backends import theirs only when they load a model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from despina import __version__
from despina.busy_poll import default_busy_poll_us, loop_factory
from despina.plugins import Plugins, create_plugins
from despina.triton_flags import add_inert_flags, triton_bool

log = logging.getLogger("despina")

#: Served when no --model-repository is given: the repository's bundled examples.
EXAMPLES_ENV = "DESPINA_DEFAULT_REPOSITORY"


def default_repository() -> Path | None:
    """``$DESPINA_DEFAULT_REPOSITORY``, else ``examples/model_repository`` of the checkout."""
    env = os.environ.get(EXAMPLES_ENV)
    if env:
        return Path(env)
    bundled = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
    return bundled if bundled.is_dir() else None


def add_core_flags(parser: argparse.ArgumentParser) -> None:
    """The flags the core implements, with tritonserver's names and defaults."""

    def non_negative_int(text: str) -> int:
        value = int(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
        return value

    server = parser.add_argument_group("server")
    server.add_argument(
        "--id",
        default="triton",
        help="server identifier reported in server metadata (default: triton, as tritonserver)",
    )
    server.add_argument(
        "--exit-timeout-secs",
        type=int,
        default=30,
        metavar="INT",
        help="seconds to wait for in-flight requests on shutdown (default: 30)",
    )
    server.add_argument(
        "--exit-on-error",
        type=triton_bool,
        default=True,
        metavar="BOOL",
        help="exit when a model fails to load at start-up (default: true)",
    )
    server.add_argument(
        "--strict-readiness",
        type=triton_bool,
        default=True,
        metavar="BOOL",
        help="ready only when every model is ready (default: true)",
    )
    server.add_argument(
        "--busy-poll-us",
        type=int,
        default=default_busy_poll_us(),
        metavar="INT",
        help="microseconds the event loop polls for new events before sleeping; saves "
        "the wake-up latency at low concurrency for CPU while traffic flows, 0 turns "
        f"it off (default: {default_busy_poll_us()}; 0 on a single CPU)",
    )
    server.add_argument(
        "--max-pending-requests",
        type=non_negative_int,
        default=4096,
        metavar="INT",
        help="requests each model version queues (per priority level) where its config sets "
        "no max_queue_size; more are refused with UNAVAILABLE 'Exceeds maximum queue size'; "
        "0 = unbounded, as Triton (Despina; default: 4096)",
    )
    repo = parser.add_argument_group("model repository")
    repo.add_argument(
        "--model-repository",
        "--model-store",
        dest="model_repository",
        action="append",
        metavar="PATH",
        help="model repository folder; repeat for several (default: the bundled examples)",
    )
    repo.add_argument(
        "--model-control-mode",
        choices=["none", "explicit", "poll"],
        default="none",
        help="none: load all at start-up; explicit: load/unload through the API; "
        "poll: follow repository changes (default: none)",
    )
    repo.add_argument(
        "--repository-poll-secs",
        type=int,
        default=15,
        metavar="INT",
        help="with poll mode: seconds between repository polls (default: 15)",
    )
    repo.add_argument(
        "--load-model",
        action="append",
        metavar="NAME",
        help="with explicit mode: model to load at start-up, '*' for all; repeatable",
    )
    repo.add_argument(
        "--model-load-thread-count",
        type=int,
        default=4,
        metavar="INT",
        help="models loaded in parallel (default: 4)",
    )
    repo.add_argument(
        "--strict-model-config",
        type=triton_bool,
        default=False,
        metavar="BOOL",
        help="require a complete config.pbtxt, no auto-complete (default: false)",
    )
    repo.add_argument(
        "--disable-auto-complete-config",
        action="store_true",
        help="do not auto-complete model configs from model files",
    )
    parser.add_argument_group("shared memory").add_argument(
        "--allow-client-shm",
        type=triton_bool,
        default=False,
        metavar="BOOL",
        help="let clients register system shared-memory regions (default: false)",
    )
    limits = parser.add_argument_group("rate limiter")
    limits.add_argument(
        "--rate-limit",
        choices=["off", "execution_count"],
        default="off",
        help="execution_count: instances run only when their rate_limiter resources are free",
    )
    limits.add_argument(
        "--rate-limit-resource",
        action="append",
        metavar="NAME:COUNT[:DEVICE]",
        help="resources available to the rate limiter; repeatable",
    )
    cache = parser.add_argument_group("response cache")
    cache.add_argument(
        "--cache-config",
        action="append",
        metavar="local,size=BYTES",
        help="enable the response cache for models with response_cache { enable: true }",
    )
    cache.add_argument(
        "--response-cache-byte-size",
        type=int,
        metavar="INT",
        help="deprecated form of --cache-config local,size=BYTES",
    )
    logs = parser.add_argument_group("logging")
    logs.add_argument(
        "--log-verbose",
        type=int,
        default=0,
        metavar="INT",
        help="verbose logging level; > 0 enables debug logs (default: 0)",
    )
    logs.add_argument(
        "--log-info",
        type=triton_bool,
        default=True,
        metavar="BOOL",
        help="log info messages (default: true)",
    )
    logs.add_argument(
        "--log-warning",
        type=triton_bool,
        default=True,
        metavar="BOOL",
        help="log warnings (default: true)",
    )
    logs.add_argument(
        "--log-error",
        type=triton_bool,
        default=True,
        metavar="BOOL",
        help="log errors (default: true)",
    )
    logs.add_argument(
        "--log-format",
        choices=["default", "ISO8601"],
        default="default",
        help="log line format (default: default)",
    )
    logs.add_argument(
        "--log-file", metavar="PATH", help="write logs to this file instead of stderr"
    )
    plugins = parser.add_argument_group("plugins")
    plugins.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE and register it as a plugin; repeatable",
    )


def build_serve_parser(plugins: Plugins) -> tuple[argparse.ArgumentParser, dict[str, str]]:
    """The ``serve`` parser: core flags, plugins' flags, then the inert tritonserver flags."""
    parser = argparse.ArgumentParser(
        prog="despina serve",
        description="Serve a Triton model repository over Triton's HTTP/gRPC protocols.",
        allow_abbrev=False,
    )
    add_core_flags(parser)
    plugins.hook.despina_addoption.call_historic(kwargs={"parser": parser})
    inert = add_inert_flags(parser)
    return parser, inert


def parse_settings(argv: Sequence[str], plugins: Plugins) -> argparse.Namespace:
    """Parse a serve command line into the flags' namespace (argparse exits on an unknown
    flag), with the default repository filled in and the inert flags given noted. The
    server reads it once into typed settings (:mod:`despina.settings`)."""
    parser, inert = build_serve_parser(plugins)
    settings = parser.parse_args(list(argv))
    if not settings.model_repository:
        default = default_repository()
        settings.model_repository = [str(default)] if default is not None else []
    settings.inert_flags_given = [
        reason for dest, reason in inert.items() if getattr(settings, dest) is not None
    ]
    return settings


def _plugins_from_flags(argv: Sequence[str]) -> list[object]:
    """Import the modules named by ``--plugin`` before the full parse."""
    import importlib

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--plugin", action="append", default=[])
    known, _ = pre.parse_known_args(list(argv))
    return [importlib.import_module(name) for name in known.plugin]


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


def cmd_serve(argv: Sequence[str]) -> int:
    from despina.server import Server, StartupError

    extra = _plugins_from_flags(argv)
    plugins = create_plugins(extra)
    try:
        server = Server(parse_settings(argv, plugins), extra)
    except StartupError as exc:
        configure_logging()
        log.error("%s", exc)
        return 1
    settings = server.settings
    configure_logging(settings.log_file, settings.log_format)
    for warning in settings.inert_flags_given:
        log.warning("flag has no effect: %s", warning)
    for failure in plugins.failures:
        log.warning("%s", failure.describe())

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await server.start()
        except StartupError as exc:
            log.error("%s", exc)
            return 1
        print_model_table(server)
        try:
            await stop.wait()
        finally:
            log.info("shutting down")
            try:
                await asyncio.wait_for(server.stop(), timeout=float(settings.exit_timeout_secs))
            except TimeoutError:
                log.warning("exit timeout reached with requests still running")
        return 0

    with asyncio.Runner(loop_factory=loop_factory(settings.busy_poll_us)) as runner:
        return runner.run(run())


def cmd_plugins(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="despina plugins", description="List installed plugins.")
    parser.add_argument("--json", action="store_true", help="print JSON")
    options = parser.parse_args(list(argv))
    rows = create_plugins().describe()
    if options.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        head = f"{row['name']}  ({row['distribution']} {row['version']})"
        if "error" in row:
            print(f"{head}  FAILED: {row['error']}")
            continue
        provides = "; ".join(f"{k}: {', '.join(v)}" for k, v in row["provides"].items() if v)
        print(f"{head}  {provides}")
    return 0


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
