"""``despina-sagemaker-serve``: the container's ``serve`` command (SageMaker starts a
container as ``docker run <image> serve``), tritonserver's ``docker/sagemaker/serve`` in
Python: it reads the ``SAGEMAKER_*`` environment, checks the model folder and runs
``despina serve --allow-sagemaker=true --allow-http=false --model-control-mode=explicit``
with the flags that script passes. Extra arguments are appended to the command line."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

#: Where SageMaker puts a single-model endpoint's model (tritonserver's fixed path;
#: ``DESPINA_SAGEMAKER_MODEL_REPO`` moves it, for tests and other hosts).
SINGLE_MODEL_REPO = "/opt/ml/model/"
#: The empty repository a multi-model endpoint starts with (models come by /models).
MULTI_MODEL_REPO = "/tmp/sagemaker"
INFERENCE_TYPES = ("infer", "generate", "generate_stream")


class ServeError(Exception):
    """A start-up refusal: its lines are printed and the command exits 1."""


def _flag(args: list[str], env: Mapping[str, str], name: str, flag: str) -> None:
    if env.get(name):
        args.append(f"{flag}={env[name]}")


def _gpu_count() -> int:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    except OSError:
        return 0
    return len(listed.stdout.splitlines())


def build_command(env: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The ``despina serve`` arguments for ``env`` and the lines to print first;
    ServeError (the script's texts) for a model folder or setting it refuses."""
    notes: list[str] = []
    single_repo = env.get("DESPINA_SAGEMAKER_MODEL_REPO", SINGLE_MODEL_REPO)
    ping_mode = env.get("SAGEMAKER_TRITON_OVERRIDE_PING_MODE") or "ready"
    repo = single_repo
    mme = env.get("SAGEMAKER_MULTI_MODEL") == "true"
    if mme:
        Path(MULTI_MODEL_REPO).mkdir(parents=True, exist_ok=True)
        repo = MULTI_MODEL_REPO
        ping_mode = env.get("SAGEMAKER_TRITON_OVERRIDE_PING_MODE") or "live"
        notes.append(
            f'Triton is running in SageMaker MME mode. Using Triton ping mode: "{ping_mode}"'
        )
    args = [f"--model-repository={repo}"]
    args.append(
        f"--model-namespacing={env.get('SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING') or 'true'}"
    )
    _flag(args, env, "SAGEMAKER_BIND_TO_PORT", "--sagemaker-port")
    _flag(args, env, "SAGEMAKER_SAFE_PORT_RANGE", "--sagemaker-safe-port-range")
    args.append(f"--allow-grpc={env.get('SAGEMAKER_TRITON_ALLOW_GRPC') or 'false'}")
    args.append(f"--allow-metrics={env.get('SAGEMAKER_TRITON_ALLOW_METRICS') or 'false'}")
    _flag(args, env, "SAGEMAKER_TRITON_METRICS_PORT", "--metrics-port")
    _flag(args, env, "SAGEMAKER_TRITON_GRPC_PORT", "--grpc-port")
    _flag(
        args, env, "SAGEMAKER_TRITON_BUFFER_MANAGER_THREAD_COUNT", "--buffer-manager-thread-count"
    )
    _flag(args, env, "SAGEMAKER_TRITON_THREAD_COUNT", "--sagemaker-thread-count")
    args.append(f"--log-verbose={env.get('SAGEMAKER_TRITON_LOG_VERBOSE') or 'true'}")
    _flag(args, env, "SAGEMAKER_TRITON_LOG_INFO", "--log-info")
    _flag(args, env, "SAGEMAKER_TRITON_LOG_WARNING", "--log-warning")
    _flag(args, env, "SAGEMAKER_TRITON_LOG_ERROR", "--log-error")
    shm_default = env.get("SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE") or "16777216"
    shm_growth = env.get("SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE") or "1048576"
    args.append(f"--backend-config=python,shm-default-byte-size={shm_default}")
    args.append(f"--backend-config=python,shm-growth-byte-size={shm_growth}")
    if env.get("SAGEMAKER_TRITON_TENSORFLOW_VERSION"):
        version = env["SAGEMAKER_TRITON_TENSORFLOW_VERSION"]
        args.append(f"--backend-config=tensorflow,version={version}")
    if env.get("SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT"):
        limit = env["SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT"]
        for gpu in range(_gpu_count()):
            args.extend(["--model-load-gpu-limit", f"{gpu}:{limit}"])
    if env.get("SAGEMAKER_TRITON_ADDITIONAL_ARGS"):
        args.extend(shlex.split(env["SAGEMAKER_TRITON_ADDITIONAL_ARGS"]))

    if not mme and (Path(repo) / "config.pbtxt").is_file():
        raise ServeError(
            "ERROR: Incorrect directory structure.",
            "       Model directory needs to contain the top level folder",
        )
    kind = env.get("SAGEMAKER_TRITON_INFERENCE_TYPE")
    if kind and kind not in INFERENCE_TYPES:
        raise ServeError(
            f"ERROR: Invalid SAGEMAKER_TRITON_INFERENCE_TYPE '{kind}'",
            "       Must be one of: infer, generate, generate_stream",
        )
    default = env.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME")
    if not mme and default:
        if not (Path(repo) / default).is_dir():
            raise ServeError(
                "ERROR: Directory with provided SAGEMAKER_TRITON_DEFAULT_MODEL_NAME "
                f"{default} does not exist"
            )
        args.append(f"--load-model={default}")
    elif not mme:
        try:
            folders = sorted(p.name for p in Path(repo).iterdir() if p.is_dir())
        except OSError:
            folders = []
        if not folders:
            raise ServeError("ERROR: No model found in model repository")
        if len(folders) > 1:
            raise ServeError(
                "ERROR: More than 1 model directory found in model repository.",
                "       Either provide a single directory or set "
                "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME to run the ensemble backend.",
                f"       Directories found in model repository: {' '.join(folders)}",
            )
        notes.append("WARNING: No SAGEMAKER_TRITON_DEFAULT_MODEL_NAME provided.")
        notes.append(f"         Starting with the only existing model directory {folders[0]}")
        default = folders[0]
        args.append(f"--load-model={default}")
    head = ["--allow-sagemaker=true", "--allow-http=false", "--model-control-mode=explicit"]
    return head + args, notes


def main(argv: Sequence[str] | None = None) -> int:
    """Build the command line from the environment and run ``despina serve`` in this
    process's place (the serving process gets SageMaker's signals)."""
    env = dict(os.environ)
    try:
        args, notes = build_command(env)
    except ServeError as exc:
        for line in exc.args:
            print(line, flush=True)
        return 1
    for line in notes:
        print(line, flush=True)
    default = next((a.split("=", 1)[1] for a in args if a.startswith("--load-model=")), None)
    if default is not None:  # what the SageMaker server reads for /invocations
        env["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] = default
    env["SAGEMAKER_TRITON_PING_MODE"] = env.get("SAGEMAKER_TRITON_OVERRIDE_PING_MODE") or (
        "live" if env.get("SAGEMAKER_MULTI_MODEL") == "true" else "ready"
    )
    command = [sys.executable, "-m", "despina", "serve", *args, *(argv or sys.argv[1:])]
    os.execve(sys.executable, command, env)
    return 0  # pragma: no cover - execve does not return


if __name__ == "__main__":
    raise SystemExit(main())
