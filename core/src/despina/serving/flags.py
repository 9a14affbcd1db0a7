"""The ``despina serve`` command line: the core's flags (tritonserver's names and
defaults), the plugins' (``despina_addoption``) and the inert tritonserver ones, parsed
into a namespace that the server reads once (:mod:`despina.serving.settings`)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from despina.inference.request_bodies import default_budget
from despina.memory.gpus import DEFAULT_MIN_COMPUTE_CAPABILITY
from despina.plugin.manager import Plugins
from despina.serving.settings import DEFAULT_BACKEND_DIRECTORY
from despina.serving.triton_flags import add_inert_flags, triton_bool

#: Served when no --model-repository is given: the repository's bundled examples.
EXAMPLES_ENV = "DESPINA_DEFAULT_REPOSITORY"
#: Served when no --model-repository is given, before the above: where Vertex AI put the
#: model's files (a local folder or a gs:// URL), as tritonserver reads it.
VERTEX_STORAGE_ENV = "AIP_STORAGE_URI"


def default_repository() -> Path | None:
    """``$DESPINA_DEFAULT_REPOSITORY``, else ``examples/model_repository`` of the checkout."""
    env = os.environ.get(EXAMPLES_ENV)
    if env:
        return Path(env)
    bundled = Path(__file__).resolve().parents[4] / "examples" / "model_repository"
    return bundled if bundled.is_dir() else None


def int_or_bool(text: str) -> int:
    """An integer, or ``true``/``false`` (1/0, any case), as tritonserver reads
    ``--log-verbose`` (its SageMaker serve script passes ``--log-verbose=true``)."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return int(lowered == "true")
    return int(text)


def add_core_flags(parser: argparse.ArgumentParser) -> None:
    """The flags the core implements, with tritonserver's names and defaults."""

    def non_negative_int(text: str) -> int:
        value = int(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
        return value

    def positive_int(text: str) -> int:
        value = int(text)
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
        return value

    def non_negative_float(text: str) -> float:
        value = float(text)
        if not 0 <= value < float("inf"):  # nan and inf too
            raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
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
        "--shutdown-grace-period",
        type=non_negative_float,
        default=0.0,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, report not ready and keep serving this long before "
        "draining, so a load balancer stops routing here first (Despina; default: 0)",
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
        default=0,
        metavar="INT",
        help="microseconds the event loop polls for new events before sleeping; saves "
        "the wake-up latency at low concurrency for CPU while traffic flows, which pays "
        "only with spare cores (default: 0, off)",
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
    server.add_argument(
        "--serving-processes",
        type=positive_int,
        default=1,
        metavar="INT",
        help="serving processes, each a full server loading every model, sharing the HTTP "
        "and gRPC ports (SO_REUSEPORT; the kernel spreads connections, not requests); above "
        "1 this process only supervises them (signals, their logs prefixed [index]) and "
        "serves the metrics summed over them; statistics calls answer the sum too; model "
        "loads and unloads (explicit, and poll mode's: process 0 alone polls), "
        "shared-memory registrations and log and trace settings reach every process; each "
        "sequence runs in one process (its correlation ID's owner; the others forward its "
        "requests there). Refused above 1: port 0, "
        "--metrics-on-http-port, summary latencies, the SageMaker, Vertex AI and (on its own "
        "port) OpenAI frontends (Despina; default: 1)",
    )
    budget = default_budget()
    server.add_argument(
        "--max-inflight-request-bytes",
        type=non_negative_int,
        default=budget,
        metavar="BYTES",
        help="bytes all request bodies in flight may hold at once, inflated (gzip, deflate) "
        "or as sent, server-wide; one that would pass it is refused (gRPC "
        "RESOURCE_EXHAUSTED, HTTP 503 with Retry-After, 413 for one larger than the whole "
        "budget); 0 = no budget (Despina; default: half the physical memory or the cgroup "
        f"limit, here {budget})",
    )
    server.add_argument(
        "--min-supported-compute-capability",
        type=float,
        default=DEFAULT_MIN_COMPUTE_CAPABILITY,
        metavar="FLOAT",
        help="GPUs of a lower CUDA compute capability get no instances "
        f"(default: {DEFAULT_MIN_COMPUTE_CAPABILITY}, as Triton)",
    )
    parser.add_argument(
        "--backend-directory",
        default=DEFAULT_BACKEND_DIRECTORY,
        metavar="PATH",
        help="where Python-based backends are found: a model whose backend no plugin "
        "provides runs <PATH>/<backend>/model.py on the python backend "
        f"(default: {DEFAULT_BACKEND_DIRECTORY}, as Triton)",
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
        "--model-load-retry-count",
        type=int,
        default=0,
        metavar="INT",
        help="times a failed model version load is tried again (default: 0)",
    )
    repo.add_argument(
        "--strict-model-config",
        type=triton_bool,
        default=None,
        metavar="BOOL",
        help="deprecated form of --disable-auto-complete-config (default: false)",
    )
    repo.add_argument(
        "--disable-auto-complete-config",
        action="store_true",
        help="do not auto-complete model configs from model files",
    )
    parser.add_argument_group("backends").add_argument(
        "--backend-config",
        action="append",
        default=None,
        metavar="[<backend>,]<setting>=<value>",
        help="a backend setting, as tritonserver's (default-max-batch-size for every "
        "backend; others the backend names); settings no backend reads are ignored",
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
        type=int_or_bool,
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
    tracing = parser.add_argument_group("tracing")
    tracing.add_argument(
        "--trace-config",
        action="append",
        metavar="[MODE,]SETTING=VALUE",
        help="trace settings, as tritonserver: rate=N, level=TIMESTAMPS|TENSORS|OFF, count=N, "
        "mode=triton|opentelemetry; triton,file=PATH, triton,log-frequency=N; "
        "opentelemetry,url=URL, opentelemetry,resource=KEY=VALUE, opentelemetry,bsp_*=N; "
        "repeatable (default: level OFF, rate 1000, count -1, mode triton)",
    )
    for flag, kind, repeat, setting in (
        ("--trace-file", str, False, "triton,file"),
        ("--trace-level", str, True, "level"),
        ("--trace-rate", int, False, "rate"),
        ("--trace-count", int, False, "count"),
        ("--trace-log-frequency", int, False, "triton,log-frequency"),
    ):
        tracing.add_argument(
            flag,
            type=kind,
            action="append" if repeat else "store",
            metavar=kind.__name__.upper(),
            help=f"deprecated form of --trace-config {setting}=...",
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


def plugin_modules(argv: Sequence[str]) -> list[object]:
    """The modules ``--plugin MODULE`` flags of a command line name, imported (before the
    full parse, which needs their flags)."""
    import importlib

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--plugin", action="append", default=[])
    known, _ = pre.parse_known_args(list(argv))
    return [importlib.import_module(name) for name in known.plugin]


def serving_processes_asked(argv: Sequence[str]) -> int:
    """The ``--serving-processes`` a command line gives (1 when none, or not a number:
    the full parse reports it), read before the full parse, which only a serving process
    needs."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--serving-processes", default="1")
    known, _ = pre.parse_known_args(list(argv))
    try:
        return int(known.serving_processes)
    except ValueError:
        return 1


def parse_settings(argv: Sequence[str], plugins: Plugins) -> argparse.Namespace:
    """Parse a serve command line into the flags' namespace (argparse exits on an unknown
    flag), with the default repository filled in and the inert flags given noted. The
    server reads it once into typed settings (:mod:`despina.serving.settings`)."""
    parser, inert = build_serve_parser(plugins)
    settings = parser.parse_args(_values_attached(parser, argv))
    if not settings.model_repository:
        storage = os.environ.get(VERTEX_STORAGE_ENV)
        if storage:  # as tritonserver: Vertex AI's model folder, when none is given
            settings.model_repository = [storage]
        else:
            default = default_repository()
            settings.model_repository = [str(default)] if default is not None else []
    settings.inert_flags_given = [
        reason for dest, reason in inert.items() if getattr(settings, dest) is not None
    ]
    settings.flag_warnings = _strict_model_config_warnings(
        settings.strict_model_config, settings.disable_auto_complete_config
    )
    return settings


def _values_attached(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """``argv`` with the value of a flag that takes one attached (``--flag=value``) where
    it starts with ``-``, as tritonserver's getopt takes the next word whatever it is
    (``--model-load-gpu-limit -1:0.6``); argparse would read it as a flag."""
    words = list(argv)
    out: list[str] = []
    while words:
        word = words.pop(0)
        action = parser._option_string_actions.get(word)
        if (
            action is not None
            and action.nargs is None  # one value (flags without one have nargs 0)
            and words
            and words[0].startswith("-")
            and words[0] not in parser._option_string_actions
        ):
            word = f"{word}={words.pop(0)}"
        out.append(word)
    return out


def _strict_model_config_warnings(strict: bool | None, disable: bool) -> list[str]:
    """tritonserver's warnings for ``--strict-model-config`` (None: not given): it is
    deprecated, and given false beside ``--disable-auto-complete-config`` it is overridden.
    ``despina serve`` prints each as tritonserver does: a plain ``Warning: <text>`` line on
    stderr, not a log line."""
    if strict is None:
        return []
    warnings = [
        "'--strict-model-config' has been deprecated! "
        "Please use '--disable-auto-complete-config' instead."
    ]
    if disable and not strict:
        warnings.append(
            "Overriding deprecated '--strict-model-config' from False to True in favor of "
            "'--disable-auto-complete-config'!"
        )
    return warnings
