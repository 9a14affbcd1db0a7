"""Triton's ``qa/L0_infer`` as its ``test.sh`` lays it out in Triton's own CPU-only run
(``TRITON_SERVER_CPU_ONLY=1``, ``TARGET=cpu``): test.sh's ``generate_model_repository``
function, taken from the tree's test.sh and run by bash in the suite folder over a
``$DATADIR`` of generated models, the same server flags, and the unchanged
``infer_test.py`` run one test at a time (``python infer_test.py InferTest.<test>``, one
case each, by exit status: its ``TestResultCollector`` runs under unittest only), once as
test.sh runs it and once with ``TEST_SYSTEM_SHARED_MEMORY=1`` (the client's tensors in
system shared memory).

``BACKENDS`` is ``onnx libtorch python python_dlpack``; ``INFER_BACKENDS=python,python_dlpack``
(comma-separated) picks others, e.g. for a server with only the Python backend.
``ENSEMBLES`` is test.sh's own switch (default 1). A v2.71 tree as ``--triton-repo``
(``git archive v2.71.0 qa src/test/models``) runs the same way with v2.71's test.sh and
test files, whose mixed ensembles (``test_ensemble_mix_*``, ``label_override``,
``wrong_label``, batch/non-batch) compose ONNX and TorchScript models instead of GraphDefs.

Adaptations (preparation only):

- ``$DATADIR/qa_model_repository`` holds the models ``gen_qa_models.py --onnx`` and
  ``--libtorch`` make, ``$DATADIR/qa_ensemble_model_repository/qa_model_repository``
  those of ``gen_qa_models.py --ensemble`` (as ``qa/common/gen_qa_model_repository``
  makes them; the ONNX ones with the generator's default opset);
- the server gets test.sh's flags without ``--backend-directory`` (a server finds its
  backends) and without v2.51's ``--backend-config=tensorflow,version=2`` (v2.71 drops
  it); with shared memory it gets ``--allow-client-shm=true``, as v2.71's test.sh gives
  it, where the server knows the flag (Triton 2.51 predates it and always allows client
  shared memory);
- with ``ENSEMBLES=0`` the ``custom_zero_1_float32`` models, which test.sh copies for
  the ensembles only and which need Triton's identity backend, are removed (a server
  without that backend, e.g. Triton 2.51 built with the Python backend alone, exits on
  the failed load).

Not run: graphdef and savedmodel (TensorFlow) and plan (TensorRT), which cannot run on
this machine, with the ensembles that need them (``test_ensemble_mix_*``, defined only
when graphdef is among the backends); openvino (``gen_qa_models.py --openvino`` imports
``openvino.inference_engine`` in v2.51 and ``openvino.runtime`` in v2.71, and the
installed openvino 2026.4 has neither); ``TEST_CUDA_SHARED_MEMORY`` (GPU only) and the
GPU target; the valgrind runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import core_suites  # a cycle: core_suites registers this suite
from qa_shell import block
from run import Context, Server, check

#: The folders of ``qa/`` this suite uses besides ``custom_models`` (LIFECYCLE_FOLDERS).
INFER_FOLDERS = ("L0_infer", "ensemble_models")

S = "L0_infer"
DEFAULT_BACKENDS = "onnx,libtorch,python,python_dlpack"
DEFAULT_SHM_SIZE_BYTES = 1024 * 1024  # test.sh's DEFAULT_SHM_SIZE_MB=1
SERVER_TIMEOUT_S = 600  # test.sh's SERVER_TIMEOUT: the wait for ready and for exit


def _backends() -> str:
    """BACKENDS as test.sh and infer_test.py read it (space-separated)."""
    return " ".join(os.environ.get("INFER_BACKENDS", DEFAULT_BACKENDS).split(","))


def _data_dir(ctx: Context, backends: str) -> Path:
    """``$DATADIR``: the generated repositories test.sh copies from."""
    data = ctx.work / "data" / "inferenceserver"
    repo = data / "qa_model_repository"
    if not repo.is_dir():
        frameworks = ["onnx"] + [b for b in ("libtorch",) if b in backends.split()]
        for framework in frameworks:  # the Python models take the ONNX models' configs
            generated = core_suites.generated(ctx, "gen_qa_models.py", f"--{framework}")
            shutil.copytree(generated, repo, dirs_exist_ok=True)
        ensembles = core_suites.generated(ctx, "gen_qa_models.py", "--ensemble")
        shutil.copytree(ensembles, data / "qa_ensemble_model_repository" / "qa_model_repository")
    return data


def _generate_model_repository(ctx: Context, d: Path, env: dict[str, str]) -> None:
    """test.sh's ``generate_model_repository``, taken from the tree's test.sh, run by bash
    with ``../common/util.sh`` sourced (it calls ``create_nop_version_dir``)."""
    function = block(d / "test.sh", "function generate_model_repository()", "}")
    script = f"source ../common/util.sh\n{function}generate_model_repository\n"
    subprocess.run(["bash", "-c", script], cwd=d, env=ctx.env(**env), check=True)
    if env["ENSEMBLES"] != "1":
        for name in ("custom_zero_1_float32", "custom_nobatch_zero_1_float32"):
            shutil.rmtree(d / "models" / name)


def _tests(ctx: Context, d: Path, env: dict[str, str]) -> list[str]:
    """The tests ``InferTest`` defines under ``env`` (its body defines some only for
    some backends and without shared memory)."""
    listing = "import infer_test as t; print(*(n for n in dir(t.InferTest) if n[:5] == 'test_'))"
    proc = subprocess.run(
        [ctx.client_python, "-c", listing],
        cwd=d,
        env=ctx.env(**env),
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.split()


def _accepts(ctx: Context, flag: str) -> bool:
    """Whether the server's ``--help`` lists ``flag``."""
    proc = subprocess.run(
        [*ctx.server_cmd, "--help"], capture_output=True, text=True, env=ctx.env(), timeout=120
    )
    return flag in proc.stdout + proc.stderr


def suite_l0_infer(ctx: Context) -> None:
    """``L0_infer/test.sh`` for ``TARGET=cpu``: infer_test.py under one server over the
    generated repository, without and with system shared memory."""
    d = ctx.qa / S
    backends = _backends()
    env = {
        "BACKENDS": backends,
        "ENSEMBLES": os.environ.get("ENSEMBLES", "1"),
        "TRITON_SERVER_CPU_ONLY": "1",
        "TARGET": "cpu",
        "TEST_VALGRIND": "0",
        "DATADIR": str(_data_dir(ctx, backends)),
    }
    _generate_model_repository(ctx, d, env)
    args = [
        f"--model-repository={d / 'models'}",
        f"--exit-timeout-secs={SERVER_TIMEOUT_S}",
        "--backend-config=python,stub-timeout-seconds=120",
        f"--backend-config=python,shm-default-byte-size={DEFAULT_SHM_SIZE_BYTES}",
    ]
    shm_args = [*args, "--allow-client-shm=true"] if _accepts(ctx, "--allow-client-shm") else args
    for tag, server_args, shm in (("cpu", args, "0"), ("cpu.system_shm", shm_args, "1")):
        log = d / f"inference_server.{tag}.log"
        client_env = {**env, "TEST_SYSTEM_SHARED_MEMORY": shm, "TEST_CUDA_SHARED_MEMORY": "0"}
        server = Server(
            ctx, server_args, log, env=client_env, verbose=False, ready_timeout=SERVER_TIMEOUT_S
        )
        try:
            if not server.started:
                check(ctx, S, f"server starts ({log.name})", False, server.log_text()[-2000:])
                continue
            for test in _tests(ctx, d, client_env):
                core_suites.unittest_case(
                    ctx, S, d, "infer_test.py", f"InferTest.{test}", **client_env
                )
        finally:
            server.stop(timeout=SERVER_TIMEOUT_S)
