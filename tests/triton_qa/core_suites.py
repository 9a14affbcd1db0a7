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

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from run import Context, check, fresh, pytest, serving

#: The suite folders of ``qa/`` these suites use (copied into the work folder).
FOLDERS = ("L0_parameters", "L0_optional_input", "L0_request_cancellation")


def _write(model_dir: Path, *lines: str) -> None:
    """A model folder with version 1 and config.pbtxt holding ``lines`` (``echo -e``)."""
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text("".join(f"{line}\n" for line in lines))


def unittest_case(ctx: Context, suite: str, cwd: Path, target: str, case: str) -> None:
    """``python target case`` as test.sh runs a file whose results a ``TestResultCollector``
    gathers (it runs under unittest only); one case, by exit status."""
    proc = subprocess.run(
        [ctx.client_python, target, case], cwd=cwd, env=ctx.env(), capture_output=True, text=True
    )
    check(ctx, suite, case, proc.returncode == 0, (proc.stdout + proc.stderr)[-1000:])


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


SUITES: dict[str, Callable[[Context], None]] = {
    "L0_parameters": suite_l0_parameters,
    "L0_optional_input": suite_l0_optional_input,
    "L0_request_cancellation": suite_l0_request_cancellation,
}
