"""``despina serve`` takes a tritonserver command line; ``despina plugins`` lists plugins."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from despina.plugin.manager import create_plugins
from despina.serving.cli import SERVE_INSTALL, startup_warnings
from despina.serving.flags import parse_settings
from despina.serving.server import Server
from despina.serving.settings import CoreSettings

FLAGS_FILE = Path(__file__).with_name("tritonserver_flags.txt")
#: Flags whose string value is one of a few choices.
CHOICE_VALUES = {
    "--model-control-mode": "explicit",
    "--log-format": "ISO8601",
    "--grpc-infer-response-compression-level": "none",
    "--cache-config": "local,size=1024",
    "--rate-limit": "execution_count",
    "--rate-limit-resource": "gpu_slot:2:0",
    "--model-load-gpu-limit": "0:0.6",
}
#: tritonserver's warnings for --strict-model-config.
DEPRECATED = (
    "'--strict-model-config' has been deprecated! "
    "Please use '--disable-auto-complete-config' instead."
)
OVERRIDE = (
    "Overriding deprecated '--strict-model-config' from False to True in favor of "
    "'--disable-auto-complete-config'!"
)
SAMPLE_VALUES = {"<boolean>": "true", "<integer>": "1", "<float>": "1.5", "<string>": "x"}


def _sample_argument(line: str) -> list[str]:
    flag, _, syntax = line.partition(" ")
    if not syntax:
        return [flag]
    value = CHOICE_VALUES.get(flag) or SAMPLE_VALUES.get(syntax, "a:b=c")
    return [f"{flag}={value}"]


def tritonserver_flags() -> list[str]:
    lines = FLAGS_FILE.read_text().splitlines()
    return [line for line in lines if line.startswith("--")]


@pytest.mark.parametrize("load_entrypoints", [True, False], ids=["plugins", "core-only"])
@pytest.mark.parametrize("line", tritonserver_flags())
def test_every_tritonserver_flag_is_recognised(line: str, load_entrypoints: bool) -> None:
    """With the installed plugins and with the core alone (their flags then inert)."""
    plugins = create_plugins(load_entrypoints=load_entrypoints)
    settings = parse_settings(_sample_argument(line), plugins)
    assert settings is not None


def test_flags_without_effect_are_reported() -> None:
    settings = parse_settings(
        ["--host-policy=numa,numa-node=0", "--pinned-memory-pool-byte-size=1"], create_plugins()
    )
    joined = "\n".join(settings.inert_flags_given)
    assert "--host-policy: host policies (NUMA, CPU pinning) are not supported" in joined
    assert "--pinned-memory-pool-byte-size" in joined


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], []),
        (["--strict-model-config=false"], [DEPRECATED]),
        (["--disable-auto-complete-config", "--strict-model-config=true"], [DEPRECATED]),
        (["--disable-auto-complete-config", "--strict-model-config=false"], [DEPRECATED, OVERRIDE]),
    ],
)
def test_strict_model_config_warnings_are_tritons(argv: list[str], expected: list[str]) -> None:
    settings = CoreSettings.from_namespace(parse_settings(argv, create_plugins()))
    assert list(settings.flag_warnings) == expected
    assert settings.auto_complete is (not argv or argv == ["--strict-model-config=false"])


def test_backend_config_is_read_not_reported_inert() -> None:
    """``--backend-config`` (test.sh of ``qa/L0_infer`` passes Python backend settings)."""
    argv = ["--backend-config=python,shm-default-byte-size=1048576", "--backend-config=a=1"]
    namespace = parse_settings(argv, create_plugins())
    assert not namespace.inert_flags_given
    settings = CoreSettings.from_namespace(namespace)
    assert settings.backend_config == ("python,shm-default-byte-size=1048576", "a=1")


def test_grpc_threads_and_response_pool_are_inert_with_their_reasons() -> None:
    """Triton 2.56/2.57 flags (``qa/L0_decoupled`` passes the pool size) start the server."""
    settings = parse_settings(
        ["--grpc-max-response-pool-size=1", "--grpc-infer-thread-count=4"], create_plugins()
    )
    joined = "\n".join(settings.inert_flags_given)
    assert "--grpc-max-response-pool-size: a streaming call's unsent responses" in joined
    assert "--grpc-infer-thread-count: the gRPC frontend serves calls on the event loop" in joined


def test_tritonserver_boolean_syntax() -> None:
    plugins = create_plugins()
    assert parse_settings(["--exit-on-error=0"], plugins).exit_on_error is False
    assert parse_settings(["--exit-on-error", "ON"], plugins).exit_on_error is True
    strict = CoreSettings.from_namespace(parse_settings(["--strict-model-config=true"], plugins))
    assert strict.auto_complete is False
    assert CoreSettings.from_namespace(parse_settings([], plugins)).auto_complete is True


def test_model_store_is_an_alias_and_repositories_repeat(tmp_path: Path) -> None:
    settings = parse_settings(
        [f"--model-store={tmp_path}", "--model-repository=/b"], create_plugins()
    )
    assert settings.model_repository == [str(tmp_path), "/b"]


def test_without_repository_the_bundled_examples_are_served() -> None:
    settings = parse_settings([], create_plugins())
    assert settings.model_repository
    assert Path(settings.model_repository[0]).name == "model_repository"


def _despina(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "despina", *args],
        capture_output=True,
        text=True,
        timeout=60,
        **kwargs,  # type: ignore[call-overload]
    )


def test_unknown_flag_is_an_error() -> None:
    result = _despina("serve", "--no-such-flag=1")
    assert result.returncode == 2
    assert "unrecognized arguments: --no-such-flag=1" in result.stderr


def test_help_documents_every_flag() -> None:
    result = _despina("--help")
    assert result.returncode == 0
    for line in tritonserver_flags():
        assert line.split()[0] in result.stdout


def test_serve_starts_warns_about_inert_flags_and_stops_on_sigterm(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "despina",
            "serve",
            f"--model-repository={tmp_path / 'repo'}",
            "--pinned-memory-pool-byte-size=1",
            "--grpc-max-response-pool-size=1",
            "--disable-auto-complete-config",
            "--strict-model-config=false",
            "--allow-http=false",
            "--allow-grpc=false",
            "--allow-metrics=false",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        seen.append(line)
        if ("Model" in line and "Status" in line) or not line:
            break
    process.send_signal(signal.SIGTERM)
    _, rest = process.communicate(timeout=30)
    output = "".join(seen) + rest
    assert process.returncode == 0, output
    assert "flag has no effect: --pinned-memory-pool-byte-size: Despina keeps tensors" in output
    assert "flag has no effect: --grpc-max-response-pool-size:" in output
    lines = output.splitlines()  # tritonserver's plain lines, which test.sh greps for
    assert f"Warning: {DEPRECATED}" in lines and f"Warning: {OVERRIDE}" in lines


def test_serve_says_when_no_frontend_is_installed_and_how_to_add_them(tmp_path: Path) -> None:
    """The core alone (no plugin from entry points) listens on no port: one warning says
    so and names the install that adds the frontends; with them installed, none."""
    argv = [f"--model-repository={tmp_path}"]
    core_only = Server(parse_settings(argv, create_plugins(load_entrypoints=False)), (), False)
    (warning,) = startup_warnings(core_only)
    assert warning.startswith("no protocol frontend is installed")
    assert "can only be used in-process" in warning and SERVE_INSTALL in warning
    assert startup_warnings(Server.from_args(argv)) == []


def test_serve_without_any_repository_says_it_serves_no_models() -> None:
    """From a wheel there is no examples/model_repository to default to (as with
    ``DESPINA_DEFAULT_REPOSITORY`` unset and no checkout): a warning, not a crash."""
    flags = parse_settings([], create_plugins())
    flags.model_repository = []
    warnings = startup_warnings(Server(flags))
    assert any(w.startswith("no model repository given: serving no models") for w in warnings)


FRAMEWORKS = ("torch", "onnxruntime", "openvino", "tensorrt", "tensorflow", "cupy")


def test_plugins_and_help_import_no_ml_framework() -> None:
    code = (
        "import sys, contextlib, io\n"
        "from despina.serving.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['plugins']); main(['--help'])\n"
        f"print(sorted(m for m in {FRAMEWORKS!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_plugins_gpu_says_whether_device_tensors_are_usable() -> None:
    """``despina plugins --gpu``: the GPUs, whether device tensors and CUDA shared memory
    are usable here (cupy and a device, or why not), and each backend's answer; with the
    cupy stand-in (host memory, TEST-ONLY) on the path, they are usable on its 2 devices."""
    import json

    from cuda_standin import STANDIN_DIR

    plain = json.loads(_despina("plugins", "--gpu", "--json").stdout)["gpu"]
    assert plain["cuda"].startswith(("usable on", "cupy "))  # a GPU machine, or why not
    assert "schedulers" not in plain["backends"] and plain["backends"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([STANDIN_DIR, *sys.path])}
    standin = _despina("plugins", "--gpu", env=env)
    assert standin.returncode == 0, standin.stderr
    assert "  device tensors and CUDA shared memory: usable on 2 CUDA device(s)" in standin.stdout


def test_plugins_lists_distributions_and_capabilities() -> None:
    result = _despina("plugins")
    assert result.returncode == 0
    assert "schedulers  (despina " in result.stdout
    assert "schedulers: default, dynamic" in result.stdout.replace("ensemble, ", "")
