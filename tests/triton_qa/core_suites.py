"""Triton's QA suites beyond ``L0_backend_python`` (issue 40), each as its ``test.sh``
lays it out: the same model folders and config lines, the same server flags, the
unchanged unittest files run under pytest (one case per test), and the log greps as cases
of their own. Models of Triton's C++ test backends (``identity``, ``repeat``, ``square``,
``sequence``) need despina-backend-qa in the server's environment.

Left out, with the reason: cases that need a GPU, TensorRT, TensorFlow, a C++ client
binary, or the model repositories Triton's CI generates under ``/data/inferenceserver``
(each suite's docstring names them). The runner (``run.py``) imports this module.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from batcher_suite import BATCHER_FOLDERS, suite_l0_batcher
from infer_suite import INFER_FOLDERS, suite_l0_infer
from lifecycle_suite import LIFECYCLE_FOLDERS, suite_l0_lifecycle
from run import (
    PYTEST_TIMEOUT_S,
    Context,
    Server,
    check,
    example,
    fresh,
    pytest,
    serving,
)
from scheduling_suites import (
    SCHEDULING_FOLDERS,
    suite_l0_rate_limiter,
    suite_l0_response_cache,
)
from sequence_suite import SEQUENCE_FOLDERS, suite_l0_sequence_batcher

#: The suite folders of ``qa/`` these suites use (copied into the work folder).
FOLDERS = (
    "L0_parameters",
    "L0_optional_input",
    "L0_request_cancellation",
    "L0_model_config",
    "openvino_models",
    "L0_decoupled",
    "L0_client_timeout",
    "L0_model_update",
    *LIFECYCLE_FOLDERS,
    *SCHEDULING_FOLDERS,
    *SEQUENCE_FOLDERS,
    *INFER_FOLDERS,
    *BATCHER_FOLDERS,
)


def _write(model_dir: Path, *lines: str) -> None:
    """A model folder with version 1 and config.pbtxt holding ``lines`` (``echo -e``)."""
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text("".join(f"{line}\n" for line in lines))


def generated(ctx: Context, generator: str, *flags: str) -> Path:
    """The models ``qa/common/<generator> <flags>`` makes (as Triton's CI makes the
    ``/data/inferenceserver`` repositories), generated once per run into the work folder
    with the runner's own Python (it has the frameworks the flags name: onnx, torch; a
    ``--client-python`` may lack them)."""
    out = ctx.work / "data" / "_".join((Path(generator).stem, *(f.strip("-") for f in flags)))
    if not out.is_dir():
        out.mkdir(parents=True)
        subprocess.run(
            [sys.executable, generator, *flags, f"--models_dir={out}"],
            cwd=ctx.qa / "common",
            check=True,
            capture_output=True,
        )
    return out


def unittest_case(
    ctx: Context, suite: str, cwd: Path, target: str, case: str, label: str = "", **env: str
) -> None:
    """``python target case`` as test.sh runs a file whose results a ``TestResultCollector``
    gathers (it runs under unittest only), with ``env`` added; one case, by exit status,
    named ``label`` (default: ``case``)."""
    try:
        proc = subprocess.run(
            [ctx.client_python, target, case],
            cwd=cwd,
            env=ctx.env(**env),
            capture_output=True,
            text=True,
            timeout=PYTEST_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        check(ctx, suite, label or case, False, f"timed out after {PYTEST_TIMEOUT_S} s")
        return
    check(ctx, suite, label or case, proc.returncode == 0, (proc.stdout + proc.stderr)[-1000:])


def suite_l0_parameters(ctx: Context) -> None:
    """``L0_parameters/test.sh``: parameters_test.py under four servers (no header
    forwarding, then the three header-forward patterns). The C++ client cases are not in
    test.sh (its TODO)."""
    s, d = "L0_parameters", ctx.qa / "L0_parameters"
    m = d / "model_repository"
    for name in ("identity", "ensemble"):
        (m / name / "1").mkdir(parents=True, exist_ok=True)
    patterns = {
        "test_params": [],
        "test_headers": ["my_header.*", "my_header.*"],
        "test_header_forward_pattern_case_insensitive": ["MY_HEADER.*", "MY_HEADER.*"],
        "test_grpc_header_forward_pattern_case_sensitive": ["(?-i)MY_HEADER.*"],
    }
    for trial, forward in patterns.items():
        args = [f"--model-repository={m}", "--exit-timeout-secs=120"]
        if forward:
            args.append(f"--grpc-header-forward-pattern={forward[0]}")
        if len(forward) > 1:
            args.append(f"--http-header-forward-pattern={forward[1]}")
        with serving(ctx, s, args, d / f"inference_server.{trial}.log", verbose=False):
            pytest(ctx, s, d, "parameters_test.py", trial, TEST_HEADER=trial)


OPTIONAL_INPUT_CASES = (
    "test_all_inputs",
    "test_optional_same_input",
    "test_optional_mix_inputs",
    "test_optional_mix_inputs_2",
    "test_ensemble_all_inputs",
    "test_ensemble_optional_same_input",
    "test_ensemble_optional_mix_inputs",
    "test_ensemble_optional_mix_inputs_2",
    "test_ensemble_optional_pipeline",
    "test_ensemble_optional_connecting_tensor",
)


def suite_l0_optional_input(ctx: Context) -> None:
    """``L0_optional_input/test.sh``: a fresh server per case (model statistics)."""
    s, d = "L0_optional_input", ctx.qa / "L0_optional_input"
    m = d / "models"
    for name in (
        "identity_2_float32",
        "ensemble_identity_2_float32",
        "pipeline_identity_2_float32",
        "optional_connecting_tensor",
    ):
        (m / name / "1").mkdir(parents=True, exist_ok=True)
    for case in OPTIONAL_INPUT_CASES:
        with serving(ctx, s, [f"--model-repository={m}"], d / f"inference_server.{case}.log"):
            unittest_case(ctx, s, d, "optional_input_test.py", f"OptionalInputTest.{case}")


GRPC_CANCELLATION_CASES = (
    "test_grpc_async_infer",
    "test_grpc_stream_infer",
    "test_aio_grpc_async_infer",
    "test_aio_grpc_stream_infer",
    "test_grpc_async_infer_cancellation_at_step_start",
)


def _identity_model(m: Path, name: str, dtype: str, batch: int, *extra: str) -> None:
    _write(
        m / name,
        f'name: "{name}"',
        'backend: "identity"',
        f"max_batch_size: {batch}",
        f'input [{{ name: "INPUT0" \n data_type: {dtype} \n dims: [ -1 ] }}]',
        f'output [{{ name: "OUTPUT0" \n data_type: {dtype} \n dims: [ -1 ] }}]',
        *extra,
    )


def suite_l0_request_cancellation(ctx: Context) -> None:
    """``L0_request_cancellation/test.sh`` without its C++ unit test binary
    (``request_cancellation_test``, built against Triton's in-process C API): the gRPC
    cancellation cases (each with the log grep for the cancellation notice), the
    scheduler cases and the implicit-state case (a TorchScript model: needs a PyTorch
    backend in the server)."""
    s, d = "L0_request_cancellation", ctx.qa / "L0_request_cancellation"
    m = fresh(d / "models")
    _identity_model(
        m,
        "custom_identity_int32",
        "TYPE_INT32",
        1024,
        "instance_group [{ kind: KIND_CPU }]",
        'parameters [{ key: "execute_delay_ms" \n value: { string_value: "10000" } }]',
    )
    for case in GRPC_CANCELLATION_CASES:
        env = {"TRITONSERVER_DELAY_GRPC_PROCESS": "5000"} if case.endswith("step_start") else {}
        log = d / f"grpc_cancellation_test.{case}.server.log"
        with serving(ctx, s, [f"--model-repository={m}"], log, **env) as server:
            target = f"grpc_cancellation_test.py::GrpcCancellationTest::{case}"
            pytest(ctx, s, d, target, case)
        needle = "Cancellation notification received for"
        check(ctx, s, f"{case}: log has {needle!r}", needle in server.log_text())

    m = fresh(d / "models")
    delay = 'parameters [{ key: "execute_delay_ms" \n value: { string_value: "6000" } }]'
    one = "instance_group [{ count: 1 \n kind: KIND_CPU }]"
    _identity_model(
        m,
        "dynamic_batch",
        "TYPE_FP32",
        2,
        one,
        "dynamic_batching { max_queue_delay_microseconds: 600000 }",
        delay,
    )
    _identity_model(
        m,
        "sequence_direct",
        "TYPE_FP32",
        1,
        one,
        "sequence_batching { direct { } \n max_sequence_idle_microseconds: 6000000 }",
        delay,
    )
    _identity_model(
        m,
        "sequence_oldest",
        "TYPE_FP32",
        1,
        one,
        "sequence_batching { oldest { max_candidate_sequences: 1 } \n"
        " max_sequence_idle_microseconds: 6000000 }",
        delay,
    )
    step = (
        '{{ model_name: "dynamic_batch" \n model_version: -1 \n input_map {{ key: "INPUT0" \n'
        ' value: "{src}" }} \n output_map {{ key: "OUTPUT0" \n value: "{dst}" }} }}'
    )
    _write(
        m / "ensemble_model",
        'name: "ensemble_model"',
        'platform: "ensemble"',
        "max_batch_size: 1",
        'input [{ name: "INPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]',
        'output [{ name: "OUTPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]',
        "ensemble_scheduling { step [",
        step.format(src="INPUT0", dst="out") + ",",
        step.format(src="out", dst="OUTPUT0"),
        "] }",
    )
    args = [f"--model-repository={m}", "--log-verbose=2"]
    with serving(ctx, s, args, d / "scheduler_test.server.log", verbose=False):
        pytest(ctx, s, d, "scheduler_test.py", "scheduler_test")

    m = fresh(d / "models")
    state = m / "sequence_state"
    (state / "1").mkdir(parents=True)
    shutil.copy(d / "implicit_state_model/config.pbtxt", state / "config.pbtxt")
    shutil.copy(d / "implicit_state_model/model.pt", state / "1/model.pt")
    log = d / "implicit_state_test.server.log"
    with serving(ctx, s, [f"--model-repository={m}"], log):
        pytest(ctx, s, d, "implicit_state_test.py", "implicit_state_test", SERVER_LOG=str(log))


#: L0_model_config's model folders whose models need what this machine lacks (not run).
MODEL_CONFIG_SKIPPED = {
    "tensorflow_savedmodel": "TensorFlow SavedModels and a TensorFlow backend",
    "tensorflow_graphdef": "TensorFlow GraphDefs and a TensorFlow backend",
    "tensorrt": "TensorRT plans (built with TensorRT on a GPU)",
    "partial_config": "openvino_int8_int8_int8 of qa_model_repository: gen_qa_models.py "
    "--openvino needs OpenVINO's pre-2022 API (openvino.inference_engine, ngraph)",
    "invalid_platform": "a TensorFlow SavedModel of qa_model_repository",
    "noautofill_noconfig": "a TensorFlow GraphDef of qa_model_repository, which "
    "noautofill_test.py loads (a TensorFlow backend)",
}
#: The platforms test.sh writes into each ``noautofill_platform`` config (its TRIALS).
MODEL_CONFIG_TRIALS = (
    "tensorflow_savedmodel",
    "tensorflow_graphdef",
    "tensorrt_plan",
    "onnxruntime_onnx",
    "pytorch_libtorch",
)
#: The model folders test.sh gives an empty version folder ("1"), by test folder.
MODEL_CONFIG_VERSION_FOLDERS = {
    "autofill_noplatform/ensemble": {
        "invalid_input_map": "fp32_dim1_batch4 fp32_dim1_batch4_input4 fp32_dim1_batch4_output3",
        "invalid_output_map": "fp32_dim1_batch4 fp32_dim1_batch4_input4 fp32_dim1_batch4_output3",
        "invalid_batch_size": "fp32_dim1_batch2 fp32_dim1_batch4",
        "invalid_decoupled_branching": "int32_dim1_nobatch_output2 repeat_int32",
        "invalid_decoupled_branching_2": "repeat_int32",
        "inconsistent_shape": "fp32_dim1_batch4 fp32_dim3_batch4",
        "inconsistent_data_type": "fp32_dim1_batch2 int32_dim1_batch4",
        "non_existing_model": "fp32_dim1_batch4 fp32_dim1_batch4_output3",
        "self_circular_dependency": "fp32_dim1_batch4 fp32_dim1_batch4_input4 "
        "fp32_dim1_batch4_output3",
        "unmapped_input": "fp32_dim1_batch4 fp32_dim1_batch4_input4 fp32_dim1_batch4_output3",
        "circular_dependency": "circular_dependency_2",
        "no_required_version": "simple",
        "no_required_version_2": "simple",
        "no_required_version_3": "simple",
    },
    "autofill_noplatform_success/ensemble": {
        "embedded_ensemble": "fp32_dim1_batch4 inner_ensemble",
        "inconsistent_shape": "fp32_dim1_batch4 fp32_dim2_nobatch",
        "inconsistent_shape_2": "fp32_dim1_batch4 fp32_dim2_nobatch",
        "unmapped_output": "fp32_dim1_batch4_output3",
    },
}


def _model_config_layout(ctx: Context, d: Path) -> None:
    """The model files test.sh copies into L0_model_config's test folders; TensorRT,
    TensorFlow and OpenVINO-generated models are not made (MODEL_CONFIG_SKIPPED).
    ``repeat_int32`` gets no ``libtriton_repeat.so`` (a server finds its repeat backend)."""
    for group, targets in MODEL_CONFIG_VERSION_FOLDERS.items():
        for target, models in targets.items():
            for name in (target, *models.split()):
                (d / group / target / name / "1").mkdir(parents=True, exist_ok=True)
    model_pt = generated(ctx, "gen_qa_models.py", "--libtorch") / (
        "libtorch_float32_float32_float32/1/model.pt"
    )
    for group, target in (
        ("autofill_noplatform", "too_few_inputs"),
        ("autofill_noplatform", "too_few_outputs"),
        ("autofill_noplatform_success", "no_name_platform"),
        ("autofill_noplatform_success", "cpu_instance"),
    ):
        (d / group / "pytorch" / target / "1").mkdir(parents=True, exist_ok=True)
        shutil.copy(model_pt, d / group / "pytorch" / target / "1")
    identity = generated(ctx, "gen_qa_identity_models.py", "--onnx")
    dest = d / "autofill_noplatform_success/onnx/cpu_instance/1"
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(identity / "onnx_zero_1_float16/1/model.onnx", dest)
    for config in d.glob("autofill_noplatform*/python/**/config.pbtxt"):
        model_py = config.parent / "model.py"
        if not model_py.exists():
            model_py = ctx.qa / "python_models/auto_complete/model.py"
        (config.parent / "1").mkdir(exist_ok=True)
        shutil.copy(model_py, config.parent / "1")
    for target in ("no_delimiter", "unknown_backend.unknown"):
        (d / "autofill_noplatform/custom" / target / "1").mkdir(parents=True)
    for target in ("empty_config.identity", "no_backend.identity"):
        (d / "autofill_noplatform_success/custom" / target / "1").mkdir(parents=True)
    for target in ("invalid_cpu", "invalid_gpu", "negative_gpu"):
        (d / "noautofill_platform" / target / "1").mkdir(parents=True)
    ov = ctx.qa / "openvino_models"
    for group, targets in (
        (
            "autofill_noplatform",
            "bad_input_dims bad_output_dims too_few_inputs "
            "too_many_inputs unknown_input unknown_output",
        ),
        ("autofill_noplatform_success", "empty_config no_config"),
    ):
        for target in targets.split():
            shutil.copytree(ov / "fixed_batch/1", d / group / "openvino" / target / "1")
    shutil.copytree(
        ov / "dynamic_batch/1", d / "autofill_noplatform_success/openvino/dynamic_batch/1"
    )
    (d / "special_cases/runtime_escape/1").mkdir()
    (d / "special_cases/runtime_escape/dummy_runtime").mkdir()
    (d / "special_cases/runtime_escape/dummy_runtime/libtriton_identity.so").touch()
    (d / "special_cases/invalid_runtime/1").mkdir()


def _expect_failure(
    ctx: Context, d: Path, case: str, args: Sequence[str], expecteds: str, prefix: str
) -> None:
    """One case of test.sh's loops over failing models: the server must not start and
    its log must hold one of the ``expected*`` texts (``grep "<prefix>$EX"``)."""
    s = "L0_model_config"
    server = Server(ctx, args, d / f"inference_server.{case.replace('/', '.')}.log", verbose=False)
    started = server.started
    server.stop()
    if started:
        check(ctx, s, case, False, "unexpected success starting the server")
        return
    texts = [p.read_text().rstrip("\n") for p in sorted(d.glob(expecteds))]
    found = any(
        subprocess.run(["grep", "-q", prefix + text, str(server.log)]).returncode == 0
        for text in texts
    )
    errors = [line for line in server.log_text().splitlines() if line.startswith("E")]
    check(ctx, s, case, found, f"expected {texts}; log errors: {errors[-3:]}")


def _expect_config(ctx: Context, d: Path, case: str, args: Sequence[str], name: str) -> None:
    """One case of test.sh's loop over succeeding models: the server starts and
    ``compare_status.py`` finds the config it serves among ``models/<name>/expected*``."""
    s = "L0_model_config"
    log = d / f"inference_server.{case.replace('/', '.')}.log"
    with serving(ctx, s, args, log, verbose=False) as server:
        if not server.started:
            return
        compare = ["compare_status.py", f"--expected_dir=models/{name}", f"--model={name}"]
        proc = subprocess.run(
            [ctx.client_python, *compare], cwd=d, env=ctx.env(), capture_output=True, text=True
        )
        check(ctx, s, case, proc.returncode == 0, (proc.stdout + proc.stderr)[-1500:])


def _model_config_target(d: Path, target_dir: str) -> tuple[str, Path]:
    """test.sh's copy of one autofill test into ``models``: a folder with a config.pbtxt
    (or named ``no_config``) is one model, any other is a whole repository. Returns the
    model's name and the folder of its ``expected*`` files."""
    m, src = fresh(d / "models"), d / target_dir
    if (src / "config.pbtxt").exists() or src.name == "no_config":
        shutil.copytree(src, m / src.name)
        return src.name, m / src.name
    for entry in src.iterdir():
        (shutil.copytree if entry.is_dir() else shutil.copy)(entry, m / entry.name)
    return src.name, m


def suite_l0_model_config(ctx: Context) -> None:
    """``L0_model_config/test.sh``: a server per test folder, started on it alone; a
    failing folder passes when the start fails and the log has an ``^E...`` line with
    one of its ``expected*`` texts, a succeeding one when ``compare_status.py`` finds
    the served config (HTTP and gRPC) equal to one of them. The ONNX identity and
    TorchScript models it copies from /data are made by Triton's generators
    (``gen_qa_identity_models.py --onnx``, ``gen_qa_models.py --libtorch``). Not run:
    the folders of MODEL_CONFIG_SKIPPED, with its reasons."""
    d = ctx.qa / "L0_model_config"
    _model_config_layout(ctx, d)
    models, grep_e = d / "models", "^E[0-9][0-9][0-9][0-9].*"
    for target, extra in (
        ("cli_deprecation", "--strict-model-config=true"),
        ("cli_override", "--disable-auto-complete-config --strict-model-config=false"),
    ):
        shutil.copytree(d / "cli_messages" / target, fresh(models) / target)
        args = [f"--model-repository={models}", *extra.split()]
        _expect_failure(ctx, d, f"cli_messages/{target}", args, f"models/{target}/expected*", "")
    for target in ("invalid_runtime", "runtime_escape"):
        shutil.copytree(d / "special_cases" / target, fresh(models) / target)
        args = [f"--model-repository={models}"]
        _expect_failure(
            ctx, d, f"special_cases/{target}", args, f"models/{target}/expected*", grep_e
        )
    for flag in ("--strict-model-config=true", "--disable-auto-complete-config"):
        for trial in MODEL_CONFIG_TRIALS:
            for src in sorted((d / "noautofill_platform").iterdir()):
                dest = fresh(models) / src.name
                shutil.copytree(src, dest)
                config = dest / "config.pbtxt"
                if config.exists():
                    lines = [x for x in config.read_text().splitlines() if "platform:" not in x]
                    config.write_text("\n".join([*lines, f'platform: "{trial}"', ""]))
                case = f"noautofill_platform {flag} {trial}/{src.name}"
                args = [f"--model-repository={models}", flag]
                _expect_failure(ctx, d, case, args, f"models/{src.name}/expected*", grep_e)
    args = [f"--model-repository={models}", "--strict-model-config=false"]
    for group in ("autofill_noplatform", "autofill_noplatform_success"):
        for target_dir in sorted((d / group).glob("*/*")):
            rel = str(target_dir.relative_to(d))
            if MODEL_CONFIG_SKIPPED.keys() & {target_dir.parent.name, target_dir.name}:
                continue
            name, expected_dir = _model_config_target(d, rel)
            if group == "autofill_noplatform":
                expecteds = str((expected_dir / "expected*").relative_to(d))
                _expect_failure(ctx, d, rel, args, expecteds, grep_e)
                continue
            _expect_config(ctx, d, rel, args, name)


DECOUPLED_CASES = (
    "test_one_to_none",
    "test_one_to_one",
    "test_one_to_many",
    "test_no_streaming",
    "test_response_order",
    "test_wrong_shape",
)


def _decoupled_models(ctx: Context, d: Path, trial: str) -> Path:
    """The repository of one trial as Dockerfile.QA and test.sh lay it out: the suite's
    ``models`` with ``repeat_int32`` and ``square_int32`` (trial ``custom``: Triton's
    C++ backends, configs from the server repository's ``src/test/models``; trial
    ``python``: the python_backend's decoupled examples), a version folder for each, and
    ``libtorch_nobatch_int32_int32_int32`` of qa_model_repository (made by
    ``gen_qa_models.py --libtorch``) with every dims made [ 1 ]."""
    m = d / ("python_models" if trial == "python" else "models")
    if trial == "python":
        shutil.copytree(d / "models", m)
        for kind in ("repeat", "square"):
            conf = f"examples/decoupled/{kind}_config.pbtxt"
            example(ctx, m, f"examples/decoupled/{kind}_model.py", conf, f"{kind}_int32")
    else:
        for name in ("repeat_int32", "square_int32"):
            shutil.copytree(ctx.work / "src/test/models" / name, m / name)
    for model_dir in m.iterdir():
        (model_dir / "1").mkdir(exist_ok=True)
    torch_model = m / "libtorch_nobatch_int32_int32_int32"
    torch_models = generated(ctx, "gen_qa_models.py", "--libtorch")
    shutil.copytree(torch_models / torch_model.name, torch_model)
    config = torch_model / "config.pbtxt"
    config.write_text(re.sub(r"dims:.*\[.*\]", "dims: [ 1 ]", config.read_text()))
    return m


def suite_l0_decoupled(ctx: Context) -> None:
    """``L0_decoupled/test.sh``: DecoupledTest under the python trial (needs
    ``--python-backend-repo``) and the custom trial, then NonDecoupledTest on
    ``repeat_int32`` made non-decoupled. ``TRITONSERVER_DELAY_GRPC_RESPONSE``, which
    test.sh exports after its server started for ``test_one_to_multi_many``, reaches
    only that client (the test asserts it is set)."""
    s, d = "L0_decoupled", ctx.qa / "L0_decoupled"
    for trial in ("python", "custom") if ctx.python_backend else ("custom",):
        m = _decoupled_models(ctx, d, trial)
        log = d / f"inference_server.{trial}.log"
        with serving(ctx, s, [f"--model-repository={m}"], log, verbose=False):
            for case in DECOUPLED_CASES:
                unittest_case(ctx, s, d, "decoupled_test.py", f"DecoupledTest.{case}")
            # test.sh exports this after the server started: only the client sees it
            multi = "DecoupledTest.test_one_to_multi_many"
            delay = {"TRITONSERVER_DELAY_GRPC_RESPONSE": "2000"}
            unittest_case(ctx, s, d, "decoupled_test.py", multi, **delay)
    m = fresh(d / "non_decoupled_models")
    shutil.copytree(d / "models/repeat_int32", m / "repeat_int32")
    config = m / "repeat_int32/config.pbtxt"
    config.write_text(config.read_text().replace("decoupled: True", "decoupled: False"))
    log = d / "non_decoupled_inference_server.log"
    with serving(ctx, s, [f"--model-repository={m}"], log, verbose=False):
        for case in ("test_grpc", "test_http"):
            unittest_case(ctx, s, d, "decoupled_test.py", f"NonDecoupledTest.{case}")


def suite_l0_client_timeout(ctx: Context) -> None:
    """``L0_client_timeout/test.sh`` without its C++ client (``client_timeout_test``, a
    binary of Triton's C++ client library: the 12 checks of its output): the Python
    infer-timeout tests, then the non-infer ones under a server started with
    ``TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC=2`` (a Triton test hook delaying every
    gRPC answer). ``test_grpc_register_cuda_shared_memory`` is left out (a CUDA region
    on GPU 0)."""
    s, d = "L0_client_timeout", ctx.qa / "L0_client_timeout"
    m = d / "models"
    (m / "custom_identity_int32/1").mkdir(parents=True, exist_ok=True)
    with serving(ctx, s, [f"--model-repository={m}", "--log-verbose=2"], d / "infer.log", False):
        for case in re.findall(r"def (test_\w+)", (d / "client_infer_timeout_test.py").read_text()):
            unittest_case(
                ctx, s, d, "client_infer_timeout_test.py", f"ClientInferTimeoutTest.{case}"
            )
    args = [
        f"--model-repository={m}",
        "--model-control-mode=explicit",
        "--allow-client-shm=true",  # as the suite's v2.71 test.sh: client shm is off by default
        "--load-model=custom_identity_int32",
        "--log-verbose=2",
    ]
    log = d / "non_infer.log"
    with serving(ctx, s, args, log, False, TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC="2"):
        target = "client_non_infer_timeout_test.py"
        for case in re.findall(r"def (test_\w+)", (d / target).read_text()):
            if case != "test_grpc_register_cuda_shared_memory":
                unittest_case(ctx, s, d, target, f"ClientNonInferTimeoutTest.{case}")


#: ``instance_update_test.py`` cases that place instances on a GPU (``KIND_GPU``).
_GPU_UPDATE_CASES = {
    "test_gpu_instance_update",
    "test_gpu_cpu_instance_update",
    "test_instance_name_update",
    "test_instance_signature",
    "test_direct_scheduler_update_with_ongoing_sequences",
    "test_oldest_scheduler_update_with_ongoing_sequences",
}


def suite_l0_model_update(ctx: Context) -> None:
    """``L0_model_update/test.sh``: instance_update_test.py under a server per rate-limit
    mode (off, execution_count, execution_count with ``--rate-limit-resource=R1:10``),
    each with the log check that no ``Should not print this`` line appeared. Left out:
    the cases that place instances on a GPU (``_GPU_UPDATE_CASES``)."""
    s, d = "L0_model_update", ctx.qa / "L0_model_update"
    target = "instance_update_test.py"
    cases = re.findall(r"def (test_\w+)", (d / target).read_text())
    modes = {
        "off": ["--rate-limit=off"],
        "execution_count": ["--rate-limit=execution_count"],
        "execution_count_with_explicit_resource": [
            "--rate-limit=execution_count",
            "--rate-limit-resource=R1:10",
        ],
    }
    for mode, flags in modes.items():
        m = fresh(d / "models")
        shutil.copytree(ctx.qa / "python_models/model_init_del", m / "model_init_del")
        (m / "model_init_del/1").mkdir()
        shutil.move(m / "model_init_del/model.py", m / "model_init_del/1/model.py")
        env = {"MODEL_LOG_DIR": str(d), "RATE_LIMIT_MODE": mode}
        log = d / f"instance_update_test.rate_limit_{mode}.server.log"
        args = [
            f"--model-repository={m}",
            "--model-control-mode=explicit",
            *flags,
            "--log-verbose=2",
        ]
        with serving(ctx, s, args, log, False, **env):
            for case in cases:
                if case not in _GPU_UPDATE_CASES:
                    unittest_case(ctx, s, d, target, f"TestInstanceUpdate.{case}", **env)
        text = log.read_text(errors="replace")
        check(ctx, s, f"no 'Should not print this' ({mode})", "Should not print this" not in text)


SUITES: dict[str, Callable[[Context], None]] = {
    "L0_parameters": suite_l0_parameters,
    "L0_optional_input": suite_l0_optional_input,
    "L0_request_cancellation": suite_l0_request_cancellation,
    "L0_model_config": suite_l0_model_config,
    "L0_decoupled": suite_l0_decoupled,
    "L0_client_timeout": suite_l0_client_timeout,
    "L0_model_update": suite_l0_model_update,
    "L0_lifecycle": suite_l0_lifecycle,
    "L0_rate_limiter": suite_l0_rate_limiter,
    "L0_response_cache": suite_l0_response_cache,
    "L0_sequence_batcher": suite_l0_sequence_batcher,
    "L0_infer": suite_l0_infer,
    "L0_batcher": suite_l0_batcher,
}
