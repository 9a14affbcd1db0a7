"""GPU tensors in Python models (issue 22): ``Tensor.from_dlpack`` of CUDA tensors,
``is_cpu``/``as_numpy``/``to_dlpack`` on them, device outputs, FORCE_CPU_ONLY_INPUT_TENSORS,
BLS ``preferred_memory``, and (process mode) CUDA IPC between the server and the model's
process, in both execution modes, through real servers and tritonclient.

The ``_standin`` tests run the models on the TEST-ONLY cupy stand-in
(``core/tests/standin_cuda``): "device" memory is host memory there, so they prove where
Despina keeps GPU tensors and how it moves them, not anything about CUDA. The ``gpu``
tests run the same models on real cupy and a GPU, and are skipped without one.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from cuda_standin import installed
from despina.testing import RepositoryBuilder, RunningServer
from test_ensemble import ensemble, step

from .gpu_models import (
    BLS,
    BLS_IO,
    NO_CUPY,
    NO_CUPY_IO,
    PAIR_IO,
    PROBE,
    PROBE_IO,
    add_gpu_models,
    force_cpu,
)
from .models import add, config

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

A = np.array([1, 2, 3, 4], np.float32)
B = np.array([10, 20, 30, 40], np.float32)
MODES = ["process", "in-process"]
REFUSAL = "Tensor is stored in GPU and cannot be converted to NumPy."


def through(probe: str) -> str:
    """An ensemble: gpu_add (device outputs) feeds ``probe``; outputs P (2 * (A + B)) and
    G (where the probe's inputs were)."""
    return ensemble(
        [
            step("gpu_add", {"INPUT0": "X", "INPUT1": "Y"}, {"OUTPUT0": "s", "OUTPUT1": "d"}),
            step(probe, {"INPUT0": "s", "INPUT1": "d"}, {"OUTPUT0": "P", "OUTPUT1": "G"}),
        ],
        ["X", "Y"],
        ["P", "G"],
    )


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def standin() -> Iterator[Any]:
    """The cupy stand-in, for this process and the model processes it starts."""
    with installed() as cupy:
        yield cupy


@pytest.fixture
def real_cuda() -> int:
    """The number of GPUs real cupy sees (skips without cupy or a GPU)."""
    try:
        import cupy
    except ImportError as exc:
        pytest.skip(f"cupy is not installed ({exc})")
    if getattr(cupy, "DESPINA_STANDIN", False):
        pytest.skip("cupy is the test stand-in here")
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        pytest.skip(f"cupy sees no CUDA device ({exc})")
    if count == 0:
        pytest.skip("cupy sees no CUDA device")
    return count


def _inputs(module: Any, names: tuple[str, str] = ("INPUT0", "INPUT1")) -> list[Any]:
    tensors = []
    for name, values in zip(names, (A, B), strict=True):
        tensor = module.InferInput(name, [4], "FP32")
        tensor.set_data_from_numpy(values)
        tensors.append(tensor)
    return tensors


def _clients(running: RunningServer, http_client: Any, grpc_client: Any) -> list[tuple[Any, Any]]:
    return [(httpclient, http_client(running)), (grpcclient, grpc_client(running))]


def _served(
    repo: RepositoryBuilder, start: Callable[..., RunningServer], mode: str
) -> RunningServer:
    add_gpu_models(repo, mode)
    repo.add("bls", config("bls", BLS_IO, mode), {"1/model.py": BLS})
    repo.add("to_cpu_probe", through("probe_cpu"))
    repo.add("to_gpu_probe", through("probe_gpu"))
    return start(repo.root)


# -- the checks, on the stand-in or a GPU ------------------------------------------------


def check_model_outputs(running: RunningServer, http_client: Any, grpc_client: Any) -> None:
    """gpu_add answers its device outputs' values; its tensors behaved as Triton's."""
    for module, client in _clients(running, http_client, grpc_client):
        result = client.infer("gpu_add", _inputs(module))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
        checks = json.loads(result.as_numpy("CHECKS")[0])
        assert checks == {
            "inputs_cpu": [True, True],  # FORCE_CPU_ONLY_INPUT_TENSORS defaults to "yes"
            "outputs_cpu": [False, False],
            "refusal": REFUSAL,
            "shares": True,  # from_dlpack and to_dlpack kept the one device allocation
            "device": [2, 0],  # kDLCUDA, device 0
        }


def check_force_cpu_only(running: RunningServer, http_client: Any, grpc_client: Any) -> None:
    """Behind gpu_add in an ensemble, probe_gpu ("no") gets its inputs on the GPU and
    probe_cpu (Triton's default) on the CPU; values are the same."""
    for module, client in _clients(running, http_client, grpc_client):
        for model, on_gpu in (("to_cpu_probe", [0, 0]), ("to_gpu_probe", [1, 1])):
            result = client.infer(model, _inputs(module, ("X", "Y")))
            np.testing.assert_array_equal(result.as_numpy("P"), 2 * (A + B))
            np.testing.assert_array_equal(result.as_numpy("G"), on_gpu)
        # from the wire, inputs are host arrays whatever the parameter says
        result = client.infer("probe_gpu", _inputs(module))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), [0, 0])


def check_bls_preferred_memory(
    running: RunningServer, http_client: Any, grpc_client: Any, device: int
) -> None:
    """BLS outputs: where the callee left them by default, on the host for CPU, on
    ``device`` for GPU (host outputs too); GPU tensors as BLS inputs reach probe_gpu on
    the GPU and probe_cpu on the CPU."""
    gpu = f"gpu:{device}"
    expected = {
        "gpu_add/default": "gpu:0",
        "gpu_add/cpu": "cpu",
        "gpu_add/gpu": gpu,
        "cpu_add/default": "cpu",
        "cpu_add/cpu": "cpu",
        "cpu_add/gpu": gpu,
    }
    for module, client in _clients(running, http_client, grpc_client):
        result = client.infer("bls", _inputs(module), parameters={"device": device})
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
        report = json.loads(result.as_numpy("REPORT")[0])
        assert {k: v[0] for k, v in report.items() if "/" in k} == expected
        assert all(v[1] == (A + B).tolist() for k, v in report.items() if "/" in k)
        assert report["probe_cpu"] == [[0, 0], (2 * A).tolist()]
        assert report["probe_gpu"] == [[1, 1], (2 * A).tolist()]


# -- on the cupy stand-in ----------------------------------------------------------------


def test_device_tensors_in_and_out_of_a_model_standin(
    standin: Any,
    mode: str,
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Any,
    grpc_client: Any,
) -> None:
    """cupy stand-in: host memory, proves the logic not CUDA. from_dlpack of a cupy array
    and of a capsule keeps them on the device (is_cpu False, as_numpy refuses with
    Triton's text, to_dlpack shares the memory); the client gets their values."""
    running = _served(model_repository, despina_server, mode)
    check_model_outputs(running, http_client, grpc_client)


def test_force_cpu_only_input_tensors_standin(
    standin: Any,
    mode: str,
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Any,
    grpc_client: Any,
) -> None:
    """cupy stand-in: host memory, proves the logic not CUDA. FORCE_CPU_ONLY_INPUT_TENSORS
    "no" gives an ensemble step its upstream's GPU tensors (in process mode through CUDA
    IPC); the default gives host copies."""
    running = _served(model_repository, despina_server, mode)
    check_force_cpu_only(running, http_client, grpc_client)
    assert standin._malloced == {}  # every IPC export of the server was copied and freed


def test_bls_preferred_memory_standin(
    standin: Any,
    mode: str,
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Any,
    grpc_client: Any,
) -> None:
    """cupy stand-in: host memory, proves the logic not CUDA. BLS outputs follow
    preferred_memory (GPU on device 1 of the stand-in's two), and GPU BLS inputs follow
    the callee's FORCE_CPU_ONLY_INPUT_TENSORS, both ways across the process boundary in
    process mode."""
    running = _served(model_repository, despina_server, mode)
    check_bls_preferred_memory(running, http_client, grpc_client, device=1)
    assert standin._malloced == {}  # every IPC export of the server was copied and freed


# -- without any cupy, and configuration ------------------------------------------------


def test_cuda_tensor_without_cupy_names_the_extra(
    mode: str,
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Any,
) -> None:
    """Where cupy is not installed, from_dlpack of a CUDA tensor raises
    TritonModelException saying how to install it (the tensor is never touched)."""
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("cupy is installed here")
    add(model_repository, "no_cupy", NO_CUPY, NO_CUPY_IO, mode)
    client = http_client(despina_server(model_repository.root))
    result = client.infer("no_cupy", _inputs(httpclient))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A)
    assert result.as_numpy("CHECKS")[0].decode() == (
        "GPU tensors need cupy, which is not installed in this environment: "
        "pip install 'despina[cuda]'"
    )


def test_force_cpu_only_input_tensors_takes_yes_or_no(
    mode: str,
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Any,
) -> None:
    """Any other value fails the load with Triton's text (its stray quote included)."""
    io = PAIR_IO + 'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]'
    add(model_repository, "odd", PROBE, io, mode, force_cpu("maybe"))
    client = http_client(despina_server(model_repository.root, ["--exit-on-error=false"]))
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["odd"]["state"] == "UNAVAILABLE"
    assert "Incorrect value for FORCE_CPU_ONLY_INPUT_TENSORS: maybe'" in index["odd"]["reason"]


# -- on a real GPU ------------------------------------------------------------------------


@pytest.mark.gpu
def test_device_tensors_in_and_out_of_a_model_on_gpu(
    real_cuda: int,
    mode: str,
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Any,
    grpc_client: Any,
) -> None:
    """Real cupy on a GPU: the stand-in test's checks."""
    running = _served(model_repository, despina_server, mode)
    check_model_outputs(running, http_client, grpc_client)


@pytest.mark.gpu
def test_force_cpu_only_and_bls_preferred_memory_on_gpu(
    real_cuda: int,
    mode: str,
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Any,
    grpc_client: Any,
) -> None:
    """Real cupy on a GPU (CUDA IPC between real processes in process mode): the
    stand-in tests' checks; GPU-preferred BLS outputs go to the last GPU."""
    running = _served(model_repository, despina_server, mode)
    check_force_cpu_only(running, http_client, grpc_client)
    check_bls_preferred_memory(running, http_client, grpc_client, device=min(real_cuda - 1, 1))


def test_force_cpu_no_without_cupy_in_the_model_environment_standin(
    monkeypatch: pytest.MonkeyPatch,
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """cupy stand-in in the server only (not on the model processes' path): a process-mode
    model with FORCE_CPU_ONLY_INPUT_TENSORS "no" whose environment lacks cupy gets its
    inputs on the host, with a warning, instead of failing on the first device input."""
    import device_backend
    from cuda_standin import STANDIN_DIR

    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.syspath_prepend(STANDIN_DIR)  # this process only: PYTHONPATH untouched
    model_repository.add("dev", device_backend.devtoy_config(), {"1/model.devtoy": ""})
    model_repository.add(
        "probe_gpu",
        config("probe_gpu", PROBE_IO, "process", force_cpu("no")),
        {"1/model.py": PROBE},
    )
    model_repository.add(
        "dev_to_probe",
        ensemble(
            [
                step("dev", {"INPUT0": "X", "INPUT1": "Y"}, {"OUTPUT0": "s", "OUTPUT1": "d"}),
                step("probe_gpu", {"INPUT0": "s", "INPUT1": "d"}, {"OUTPUT0": "P", "OUTPUT1": "G"}),
            ],
            ["X", "Y"],
            ["P", "G"],
        ),
    )
    running = despina_server(model_repository.root, plugins=[device_backend])
    try:
        assert not running.server.models.get("probe_gpu").device_inputs
        result = http_client(running).infer("dev_to_probe", _inputs(httpclient, ("X", "Y")))
        np.testing.assert_array_equal(result.as_numpy("P"), 2 * (A + B))
        np.testing.assert_array_equal(result.as_numpy("G"), [0, 0])  # host inputs
        assert "has no cupy" in caplog.text
    finally:
        sys.modules.pop("cupy", None)  # the stand-in leaves with its path
