"""Triton's ``qa/L0_lifecycle`` (v2.51.0) as its ``test.sh`` lays it out: the same model
preparation (test.sh's own cp/sed/echo lines, run by bash in the suite folder), the same
server flags, the unchanged ``lifecycle_test.py`` run one test at a time (``python
lifecycle_test.py LifeCycleTest.<test>``, one case each, by exit status), and test.sh's
log greps and curl checks as cases of their own.

Adaptations (preparation only): the ONNX models test.sh copies from
``$DATADIR/qa_model_repository`` are made by ``gen_qa_models.py --onnx``, the ensembles of
``qa_ensemble_model_repository`` by ``gen_qa_models.py --ensemble``; ``libtriton_identity.so``
is not copied into ``identity_zero_1_int32``'s version folders (a server finds its
identity backend); the control-API curl checks in poll mode use ``onnx_float32_float32_float32``
instead of ``graphdef_float32_float32_float32`` and the invalid-endpoint curls serve
``onnx_int32_int32_int32`` instead of ``graphdef_int32_int32_int32`` (the checks do not
depend on the framework); ``models_0``, which the skipped
``_control_startup_models`` steps leave behind for the ``--load-model=*`` check, is made
empty; the client gets ``TRITON_SERVER_VERSION``, the CI container's
variable naming the version of the server it holds, which ``test_parse_error_noexit``
compares with the served version: 2.51.0 for tritonserver, Despina's own version for
Despina (which reports its own).

Not run (``lifecycle_test.py`` asserts on GraphDef, SavedModel or TensorRT models, or the
step needs a GPU): ``test_parse_error_modelfail``, ``_modelfail_nostrict``,
``_no_model_config``, ``test_init_error_modelfail``, ``test_parse_error_model_no_version``,
``test_parse_ignore_zero_prefixed_version``, ``test_parse_ignore_non_intergral_version``,
``test_dynamic_model_load_unload``, ``_disabled``, ``test_dynamic_version_load_unload``,
``_disabled``, ``test_dynamic_model_modify``, ``test_dynamic_file_delete``,
``test_multiple_model_repository_polling``, ``_control``, ``_control_startup_models``
(both servers), ``test_model_repository_index``, ``test_load_same_model_different_platform``
(a TensorRT plan), ``test_add_custom_config``, ``test_delete_custom_config``
(SavedModels), ``test_load_gpu_limit`` (a CUDA memory consumer on GPU 0; its two
flag-parsing server starts run) and ``test_model_reload_fail``'s KIND_GPU reload needs
no GPU (the identity backend refuses it), so it runs.

``LIFECYCLE_STEPS=name,name`` (the step names of STEPS) runs only those steps.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import core_suites  # a cycle: core_suites registers this suite
from run import Context, Server, check, http_status

#: The folders of ``qa/`` this suite uses besides python_models (copied into the work folder).
LIFECYCLE_FOLDERS = ("L0_lifecycle", "custom_models")

S = "L0_lifecycle"
SLEEP_TIME = 10  # test.sh's sleep after starts it does not wait for
TEST = "lifecycle_test.py"


def _dir(ctx: Context) -> Path:
    return ctx.qa / "L0_lifecycle"


def _prep(ctx: Context, script: str) -> None:
    """Run test.sh's preparation lines with bash in the suite folder; ``$ONNX`` and
    ``$ENSEMBLE`` stand for the generated ``qa_model_repository`` and
    ``qa_ensemble_model_repository``."""
    env = dict(
        os.environ,
        ONNX=str(core_suites.generated(ctx, "gen_qa_models.py", "--onnx")),
        ENSEMBLE=str(core_suites.generated(ctx, "gen_qa_models.py", "--ensemble")),
    )
    subprocess.run(["bash", "-ec", script], cwd=_dir(ctx), env=env, check=True)


def _args(ctx: Context, text: str) -> list[str]:
    """test.sh's SERVER_ARGS with `pwd` as the suite folder."""
    return text.replace("`pwd`", str(_dir(ctx))).split()


def _log(ctx: Context, tag: str) -> Path:
    return _dir(ctx) / f"inference_server.{tag}.log"


def _server_version(ctx: Context) -> str:
    """TRITON_SERVER_VERSION as the CI container sets it: the version of the server it
    holds (tritonserver: 2.51.0; Despina reports its own)."""
    if Path(ctx.server_cmd[0]).name == "tritonserver":
        return "2.51.0"
    return importlib.metadata.version("despina")


def _server(
    ctx: Context, args: str, tag: str, *, until: str = "ready", wait_ports: bool = True
) -> Server:
    """``run_server`` with test.sh's SERVER_ARGS (no verbose flag of the runner's own)."""
    return Server(
        ctx, _args(ctx, args), _log(ctx, tag), verbose=False, until=until, wait_ports=wait_ports
    )


def _test(ctx: Context, name: str, **env: str) -> None:
    version = _server_version(ctx)
    core_suites.unittest_case(
        ctx, S, _dir(ctx), TEST, f"LifeCycleTest.{name}", TRITON_SERVER_VERSION=version, **env
    )


def _grep(ctx: Context, server: Server, text: str, count: int | None = None) -> None:
    """A log check: ``text`` (a regex) is in the log (``count`` times when given)."""
    found = len(re.findall(text, server.log_text()))
    ok = found == count if count is not None else found > 0
    want = f"{count} time(s)" if count is not None else "present"
    check(ctx, S, f"{server.log.name}: log has {text!r} {want}", ok, f"found {found}")


def _started(ctx: Context, server: Server) -> bool:
    """test.sh's ``exit 1`` on a failed ``run_server`` becomes a failed case here."""
    if not server.started:
        check(ctx, S, f"server starts ({server.log.name})", False, server.log_text()[-1500:])
    return server.started


def _http(method: str, path: str) -> int:
    """``curl -s -w %{http_code}``: the status of ``method path`` on port 8000 (0: none)."""
    return http_status(method, f"http://127.0.0.1:8000{path}")


def _run(
    ctx: Context,
    tag: str,
    prep: str,
    args: str,
    tests: Sequence[str],
    *,
    until: str = "ready",
    greps: Sequence[tuple[str, int | None]] = (),
    server_pid: bool = False,
    **env: str,
) -> None:
    """The common shape of a step: prepare, start, run the tests, stop, grep the log.
    ``server_pid``: the tests get SERVER_PID and SERVER_LOG (they stop the server)."""
    if prep:
        _prep(ctx, prep)
    server = _server(ctx, args, tag, until=until)
    if until == "":
        time.sleep(SLEEP_TIME)
    if until == "" or _started(ctx, server):
        extra = {"SERVER_PID": str(server.proc.pid), "SERVER_LOG": str(server.log)}
        for name in tests:
            _test(ctx, name, **(extra if server_pid else {}), **env)
    server.stop()
    for text, count in greps:
        _grep(ctx, server, text, count)


def step_parse_error_noexit(ctx: Context) -> None:
    """Four servers of a missing repository (alone or with an empty one), each
    ``--exit-on-error=false``: not live, not ready, metadata served."""
    trials = {
        "noexit_strict": "--model-repository=/tmp/xyzx --strict-readiness=true",
        "noexit": "--model-repository=/tmp/xyzx --strict-readiness=false",
        "noexit_strict_multi": "--model-repository=/tmp/xyzx --model-repository=`pwd`/models "
        "--strict-readiness=true",
        "noexit_multi": "--model-repository=`pwd`/models --model-repository=/tmp/xyzx "
        "--strict-readiness=false",
    }
    for tag, args in trials.items():
        prep = "rm -rf models && mkdir models" if "multi" in tag else ""
        _run(ctx, tag, prep, f"{args} --exit-on-error=false", ["test_parse_error_noexit"], until="")


#: (tag, the second server's flags, the text its log must hold once (None: at least once))
PORT_COLLISIONS = (
    ("grpc", "--http-port 8003 --metrics-port 8004", "failed to start GRPC service: "
     "Unavailable - Socket '0.0.0.0:8001' already in use", 1),
    ("http", "--grpc-port 8003 --metrics-port 8004", "failed to start HTTP service: "
     "Unavailable - Socket '0.0.0.0:8000' already in use", 1),
    ("metrics", "--grpc-port 8003 --http-port 8004", "failed to start Metrics service: "
     "Unavailable - Socket '0.0.0.0:8002' already in use", 1),
    ("multiple", "", "failed to start.*service: Unavailable - Socket '.*' already in use", None),
)  # fmt: skip


def step_port_collisions(ctx: Context) -> None:
    """A second server on ports the first holds logs which service failed to start;
    then a second server on other ports starts."""
    _prep(ctx, "rm -rf models && mkdir models")
    for tag, flags, text, count in PORT_COLLISIONS:
        first = _server(ctx, "--model-repository=`pwd`/models", f"stub_{tag}")
        if _started(ctx, first):
            args = f"--model-repository=`pwd`/models {flags}"
            second = _server(ctx, args, f"collision_{tag}", until="", wait_ports=False)
            time.sleep(SLEEP_TIME)
            second.stop()
            _grep(ctx, second, re.escape(text) if count else text, count)
        first.stop()
    first = _server(ctx, "--model-repository=`pwd`/models", "no_collision")
    if _started(ctx, first):
        flags = "--grpc-port 8003 --http-port 8004 --metrics-port 8005"
        args = f"--model-repository=`pwd`/models {flags}"
        second = _server(ctx, args, "no_collision_2", until="", wait_ports=False)
        time.sleep(SLEEP_TIME)
        alive = second.proc.poll() is None
        check(ctx, S, "no port collision: the second server runs", alive, second.log_text()[-1500:])
        second.stop()
    first.stop()


_ONNX_AND_ENSEMBLE = """rm -fr models config.pbtxt.* && mkdir models
cp -r $ONNX/onnx_float32_float32_float32 models/.
cp -r $ENSEMBLE/simple_onnx_float32_float32_float32 models/.
sed -i "s/max_batch_size:.*/max_batch_size: 1/" models/onnx_float32_float32_float32/config.pbtxt
sed -i "s/max_batch_size:.*/max_batch_size: 1/" models/simple_onnx_float32_float32_float32/config.pbtxt
"""
_EXPLICIT = (
    "--model-repository=`pwd`/models --model-control-mode=explicit --exit-timeout-secs=5 "
    "--strict-model-config=false --strict-readiness=false"
)


def step_model_control(ctx: Context) -> None:
    """test_model_control, test_model_control_fail, test_model_control_ensemble."""
    _run(ctx, "model_control", _ONNX_AND_ENSEMBLE, _EXPLICIT, ["test_model_control"])
    prep = """rm -fr models config.pbtxt.* && mkdir models
cp -r $ONNX/onnx_float32_float32_float32 models/.
rm models/onnx_float32_float32_float32/*/*
sed -i "s/max_batch_size:.*/max_batch_size: 1/" models/onnx_float32_float32_float32/config.pbtxt
"""
    _run(ctx, "model_control_fail", prep, _EXPLICIT, ["test_model_control_fail"])
    tests = ["test_model_control_ensemble"]
    _run(ctx, "model_control_ensemble", _ONNX_AND_ENSEMBLE, _EXPLICIT, tests)


def step_startup_model_errors(ctx: Context) -> None:
    """``--load-model=*`` with another ``--load-model``, and a startup model that does
    not exist: both servers must fail to start (the second logs why)."""
    prep = """rm -fr models && mkdir models && mkdir -p models_0
cp -r $ONNX/onnx_float32_float32_float32 models/.
sed -i "s/max_batch_size:.*/max_batch_size: 1/" models/onnx_float32_float32_float32/config.pbtxt
"""
    _prep(ctx, prep)
    args = (
        "--model-repository=`pwd`/models --model-repository=`pwd`/models_0 "
        "--model-control-mode=explicit --strict-readiness=true --exit-on-error=true "
        "--load-model=* --load-model=onnx_float32_float32_float32"
    )
    server = _server(ctx, args, "load_model_star_and_name")
    server.stop()
    check(ctx, S, "--load-model=* with another --load-model: no start", not server.started)
    _prep(ctx, "rm -fr models && mkdir models")
    args = (
        "--model-repository=`pwd`/models --model-control-mode=explicit "
        "--strict-readiness=true --exit-on-error=true --load-model=does-not-exist"
    )
    server = _server(ctx, args, "load_model_missing")
    server.stop()
    check(ctx, S, "--load-model of a missing model: no start", not server.started)
    _grep(ctx, server, "model not found in any model repository")


_IDENTITY_EXPLICIT = (
    "--model-repository=`pwd`/models --model-control-mode=explicit --exit-timeout-secs=5 "
    "--strict-model-config=false --load-model=identity_zero_1_int32 --strict-readiness=false"
)
_POLICY_1 = (
    'echo "version_policy: { specific { versions: [1] }}" >> '
    "models/identity_zero_1_int32/config.pbtxt"
)
_AVAILABILITY = {
    "test_model_availability_on_reload": "cp -r identity_zero_1_int32 models/. && "
    "mkdir -p models/identity_zero_1_int32/1",
    "test_model_availability_on_reload_2": "cp -r identity_zero_1_int32 models/. && "
    "mkdir -p models/identity_zero_1_int32/1 && mkdir -p models/identity_zero_1_int32/2\n"
    f"{_POLICY_1}\n"
    "cp identity_zero_1_int32/config.pbtxt config.pbtxt.v2\n"
    'echo "version_policy: { specific { versions: [2] }}" >> config.pbtxt.v2',
    "test_model_availability_on_reload_3": "cp -r identity_zero_1_int32 models/. && "
    "mkdir -p models/identity_zero_1_int32/1 && mkdir -p models/identity_zero_1_int32/2\n"
    f"{_POLICY_1}\n"
    "cp models/identity_zero_1_int32/config.pbtxt config.pbtxt.new",
}


def step_model_availability(ctx: Context) -> None:
    """The three availability-on-reload tests, each over gRPC then HTTP."""
    for test, prep in _AVAILABILITY.items():
        for protocol in ("grpc", "http"):
            env = {"TRITONSERVER_USE_GRPC": "1"} if protocol == "grpc" else {}
            prep = f"rm -fr models config.pbtxt.* && mkdir models\n{prep}"
            _run(ctx, f"{test}.{protocol}", prep, _IDENTITY_EXPLICIT, [test], **env)


def step_model_reload_fail(ctx: Context) -> None:
    """A reload to KIND_GPU fails (the identity backend has no GPU instances) and the
    loaded version keeps serving."""
    prep = """rm -fr models config.pbtxt.* && mkdir models
cp -r identity_zero_1_int32 models/. && mkdir -p models/identity_zero_1_int32/1 && \
    mkdir -p models/identity_zero_1_int32/2
echo "version_policy: { specific { versions: [1] }}" >> models/identity_zero_1_int32/config.pbtxt
cp identity_zero_1_int32/config.pbtxt config.pbtxt.v2.gpu && \
    echo "version_policy: { specific { versions: [2] }}" >> config.pbtxt.v2.gpu && \
    sed -i "s/KIND_CPU/KIND_GPU/" config.pbtxt.v2.gpu
"""
    text = "failed to load 'identity_zero_1_int32' version 2: Internal: GPU instances not supported"
    tests = ["test_model_reload_fail"]
    _run(ctx, "model_reload_fail", prep, _IDENTITY_EXPLICIT, tests, greps=[(text, None)])


def step_control_api_in_poll_mode(ctx: Context) -> None:
    """Poll mode (``--model-store``, polling off): the load and unload APIs answer an
    error and the model stays ready even after its files are gone."""
    prep = """rm -fr models config.pbtxt.* && mkdir models
cp -r $ONNX/onnx_float32_float32_float32 models/.
"""
    _prep(ctx, prep)
    args = (
        "--model-store=`pwd`/models --repository-poll-secs=0 --exit-timeout-secs=5 "
        "--strict-model-config=false --model-control-mode=poll"
    )
    server = _server(ctx, args, "poll_control_api")
    if _started(ctx, server):
        name = "onnx_float32_float32_float32"
        code = _http("POST", f"/v2/repository/models/{name}/unload")
        check(ctx, S, "poll mode: unload API is refused", code != 200, str(code))
        code = _http("GET", f"/v2/models/{name}/ready")
        check(ctx, S, "poll mode: model ready after unload call", code == 200, str(code))
        _prep(ctx, f"rm models/{name}/*/*")
        code = _http("POST", f"/v2/repository/models/{name}/load")
        check(ctx, S, "poll mode: load API is refused", code != 200, str(code))
        code = _http("GET", f"/v2/models/{name}/ready")
        check(ctx, S, "poll mode: model ready after load call", code == 200, str(code))
    server.stop()


def step_invalid_endpoints(ctx: Context) -> None:
    """Three paths that are no API answer 404."""
    _prep(ctx, "rm -fr models && mkdir models && cp -r $ONNX/onnx_int32_int32_int32 models/.")
    args = "--model-repository=`pwd`/models --model-control-mode=none --exit-timeout-secs=5"
    server = _server(ctx, args, "invalid_endpoints")
    if _started(ctx, server):
        for path in ("/notapi/v2", "/v2/notapi", "/v2/models/notapi/foo"):
            code = _http("GET", path)
            check(ctx, S, f"GET {path} is 404", code == 404, str(code))
    server.stop()


def step_overrides(ctx: Context) -> None:
    """test_config_override (one repository given twice), test_file_override and
    test_file_override_security."""
    prep = """rm -fr models config.pbtxt.* && mkdir models
cp -r $ONNX/onnx_float32_float32_float32 models/.
rm models/onnx_float32_float32_float32/1/*
rm models/onnx_float32_float32_float32/3/*
"""
    args = (
        "--model-repository=`pwd`/models --model-repository=`pwd`/models "
        "--model-control-mode=explicit --strict-model-config=false"
    )
    _run(ctx, "config_override", prep, args, ["test_config_override"])
    prep = """rm -fr models config.pbtxt.* && mkdir models
cp -r $ONNX/onnx_float32_float32_float32 models/.
rm -rf models/onnx_float32_float32_float32/1
"""
    args = (
        "--model-repository=`pwd`/models --model-control-mode=explicit "
        "--load-model=onnx_float32_float32_float32 --strict-model-config=false"
    )
    tests = ["test_file_override", "test_file_override_security"]
    _run(ctx, "file_override", prep, args, tests)


_CUSTOM_ZERO = """cp -r ../custom_models/custom_zero_1_float32 models/. && \
    mkdir -p models/custom_zero_1_float32/1 && \
    (cd models/custom_zero_1_float32 && \
        echo "dynamic_batching {}" >> config.pbtxt
        echo "parameters [" >> config.pbtxt && \
        echo "{ key: \\"execute_delay_ms\\"; value: { string_value: \\"5000\\" }}" >> config.pbtxt && \
        echo "]" >> config.pbtxt)
"""


def step_shutdown_inflight(ctx: Context) -> None:
    """test_shutdown_dynamic, _sequence, _ensemble: the test stops the server with
    requests in flight; the log counts them (test.sh's grep patterns are basic regular
    expressions, whose parentheses match themselves: escaped here)."""
    args = "--model-repository=`pwd`/models --log-verbose=1"
    fresh = "rm -fr models config.pbtxt.* && mkdir models\n"
    text = "Model '{}' (version 1) has {} in-flight inferences"
    _run(
        ctx,
        "shutdown_dynamic",
        fresh + _CUSTOM_ZERO,
        args,
        ["test_shutdown_dynamic"],
        greps=[(re.escape(text.format("custom_zero_1_float32", 1)), None)],
        server_pid=True,
    )
    prep = fresh + (
        "cp -r ../custom_models/custom_sequence_int32 models/. && "
        "mkdir -p models/custom_sequence_int32/1"
    )
    _run(
        ctx,
        "shutdown_sequence",
        prep,
        args,
        ["test_shutdown_sequence"],
        greps=[(re.escape(text.format("custom_sequence_int32", n)), None) for n in (2, 1)],
        server_pid=True,
    )
    prep = fresh + (
        "cp -r ensemble_zero_1_float32 models/. && mkdir -p models/ensemble_zero_1_float32/1\n"
    )
    _run(
        ctx,
        "shutdown_ensemble",
        prep + _CUSTOM_ZERO,
        args,
        ["test_shutdown_ensemble"],
        greps=[(re.escape(text.format("ensemble_zero_1_float32", 1)), None)],
        server_pid=True,
    )


def step_load_gpu_limit_flags(ctx: Context) -> None:
    """The two invalid ``--model-load-gpu-limit`` values stop the server at start."""
    _prep(ctx, "rm -fr models config.pbtxt.* && mkdir models")
    for value, text in (
        ("-1:0.6", "expects device ID >= 0, got -1"),
        ("0:-0.4", "expects limit fraction to be in range [0.0, 1.0], got -0.4"),
    ):
        args = f"--model-repository=`pwd`/models --model-control-mode=explicit --model-load-gpu-limit {value}"
        server = _server(ctx, args, f"gpu_limit_{value}")
        server.stop()
        check(ctx, S, f"--model-load-gpu-limit {value}: no start", not server.started)
        _grep(ctx, server, re.escape(text))


def _python_identity(dest: str, sleep: str = "", method: str = "initialize(self, args)") -> str:
    """test.sh's copy of python_models/identity_fp32 into ``models/<dest>`` with model.py
    in version 1 and, given ``sleep``, a method that sleeps that long appended."""
    lines = f"cp -r ../python_models/identity_fp32 models/{dest} && (cd models/{dest} && mkdir 1 && mv model.py 1"
    if sleep:
        lines += (
            f' && echo "    def {method}:" >> 1/model.py'
            ' && echo "        import time" >> 1/model.py'
            f' && echo "        time.sleep({sleep})" >> 1/model.py'
        )
    return lines + ")\n"


def step_concurrent(ctx: Context) -> None:
    """The six concurrent load/unload tests, each under its own server."""
    explicit = "--model-repository=`pwd`/models --model-control-mode=explicit"
    prep = (
        """rm -rf models && mkdir models
MODEL_NAME="identity_zero_1_int32"
cp -r ${MODEL_NAME} models && mkdir -p models/${MODEL_NAME}/1
cp -r models/${MODEL_NAME} models/${MODEL_NAME}_1 && \
    sed -i "s/${MODEL_NAME}/${MODEL_NAME}_1/" models/${MODEL_NAME}_1/config.pbtxt
mv models/${MODEL_NAME} models/${MODEL_NAME}_2 && \
    sed -i "s/${MODEL_NAME}/${MODEL_NAME}_2/" models/${MODEL_NAME}_2/config.pbtxt
MODEL_NAME="identity_fp32"
"""
        + _python_identity("identity_fp32", "10")
        + """
cp -r models/${MODEL_NAME} models/python_${MODEL_NAME}_1 && \
    sed -i "s/${MODEL_NAME}/python_${MODEL_NAME}_1/" models/python_${MODEL_NAME}_1/config.pbtxt
mv models/${MODEL_NAME} models/python_${MODEL_NAME}_2 && \
    sed -i "s/${MODEL_NAME}/python_${MODEL_NAME}_2/" models/python_${MODEL_NAME}_2/config.pbtxt
"""
    )
    _run(ctx, "concurrent_load_speedup", prep, explicit, ["test_concurrent_model_load_speedup"])
    prep = """rm -rf models models_v1 models_v2 && mkdir models models_v2
cp -r identity_zero_1_int32 models/identity_model && \
    (cd models/identity_model && mkdir 1 && \
        sed -i "s/identity_zero_1_int32/identity_model/" config.pbtxt)
cp -r ../python_models/identity_fp32 models_v2/identity_model && \
    (cd models_v2/identity_model && mkdir 1 && mv model.py 1 && \
        sed -i "s/identity_fp32/identity_model/" config.pbtxt)
"""
    _run(ctx, "concurrent_load", prep, explicit, ["test_concurrent_model_load"])
    prep = """rm -rf models && mkdir models
cp -r identity_zero_1_int32 models && mkdir -p models/identity_zero_1_int32/1
cp -r ensemble_zero_1_float32 models && mkdir -p models/ensemble_zero_1_float32/1
cp -r ../custom_models/custom_zero_1_float32 models/. && \
    mkdir -p models/custom_zero_1_float32/1 && \
    (cd models/custom_zero_1_float32 && \
        echo "parameters [" >> config.pbtxt && \
        echo "{ key: \\"creation_delay_sec\\"; value: { string_value: \\"10\\" }}" >> config.pbtxt && \
        echo "]" >> config.pbtxt)
"""
    _run(ctx, "concurrent_load_unload", prep, explicit, ["test_concurrent_model_load_unload"])
    prep = """rm -rf models && mkdir models
cp -r identity_zero_1_int32 models && (cd models/identity_zero_1_int32 && mkdir 1 && \
    sed -i "s/string_value: \\"10\\"/string_value: \\"0\\"/" config.pbtxt)
"""
    args = f"{explicit} --model-load-thread-count=32 --log-verbose=2"
    tests = ["test_concurrent_same_model_load_unload_stress"]
    _run(ctx, "concurrent_stress", prep, args, tests)
    prep = "rm -rf models && mkdir models\n" + _python_identity("identity_fp32", "10")
    prep += "rm models/identity_fp32/config.pbtxt\n"
    tests = ["test_concurrent_model_instance_load_speedup"]
    _run(ctx, "concurrent_instance_speedup", prep, explicit, tests)
    prep = """rm -rf models && mkdir models
cp -r ../python_models/identity_fp32 models/python_float32_float32_float32
mkdir models/python_float32_float32_float32/1
mv models/python_float32_float32_float32/model.py models/python_float32_float32_float32/1
rm models/python_float32_float32_float32/config.pbtxt
mkdir models/onnx_float32_float32_float32
cp -r $ONNX/onnx_float32_float32_float32/1 models/onnx_float32_float32_float32/1
"""
    tests = ["test_concurrent_model_instance_load_sanity"]
    args = f"{explicit} --log-verbose=2"
    _run(ctx, "concurrent_instance_sanity", prep, args, tests, PARALLEL_BACKENDS="python onnx")


def step_load_retry(ctx: Context) -> None:
    """retry_model fails its first load: no start without ``--model-load-retry-count``,
    ready with ``--model-load-retry-count=1``."""
    prep = "rm -fr models config.pbtxt.* && mkdir models && cp -r retry_model models/."
    _prep(ctx, prep)
    args = "--model-repository=`pwd`/models --model-control-mode=none"
    server = _server(ctx, args, "load_retry_none")
    server.stop()
    check(ctx, S, "retry_model without retries: no start", not server.started)
    _prep(ctx, prep)
    server = _server(ctx, f"{args} --model-load-retry-count=1", "load_retry")
    if _started(ctx, server):
        code = _http("GET", "/v2/models/retry_model/ready")
        check(ctx, S, "retry_model ready after one retry", code == 200, str(code))
    server.stop()


def step_python_lifecycle(ctx: Context) -> None:
    """test_model_config_overwite, test_shutdown_while_background_unloading,
    test_shutdown_while_loading, test_shutdown_with_live_connection,
    test_load_new_model_version: Python models and their log checks."""
    fresh = "rm -rf models && mkdir models\n"
    prep = fresh + _python_identity("identity_fp32", "5")
    prep += "rm models/identity_fp32/config.pbtxt\n"
    args = (
        "--model-repository=`pwd`/models --model-control-mode=explicit --load-model identity_fp32"
    )
    _run(ctx, "config_overwrite", prep, args, ["test_model_config_overwite"])
    prep = fresh + _python_identity("identity_fp32", "10", "finalize(self)")
    tests = ["test_shutdown_while_background_unloading"]
    greps = [("successfully unloaded", 2)]
    _run(ctx, "background_unloading", prep, f"{args} --log-verbose=2", tests, greps=greps)
    prep = fresh + _python_identity("identity_fp32", "10")
    args = "--model-repository=`pwd`/models --model-control-mode=explicit --log-verbose=2"
    _prep(ctx, prep)
    server = _server(ctx, args, "shutdown_while_loading")
    if _started(ctx, server):
        _test(ctx, "test_shutdown_while_loading")
    server.stop()
    order = re.findall(r"AsyncUnload\(\)|OnLoadFinal\(\)", server.log_text())
    want = ["OnLoadFinal()", "AsyncUnload()"]
    check(ctx, S, "shutdown while loading: load ends before unload", order == want, str(order))
    prep = (
        fresh
        + "cp -r ../python_models/add_sub models/ && (cd models/add_sub && mkdir 1 && mv model.py 1)"
    )
    args = "--model-repository=`pwd`/models"
    tests = ["test_shutdown_with_live_connection"]
    _run(ctx, "live_connection", prep, args, tests, server_pid=True)
    prep = (
        fresh
        + """cp -r ../python_models/identity_fp32 models/ && (cd models/identity_fp32 && \
    echo "version_policy: { specific: { versions: [1, 2] } }" >> config.pbtxt && \
    echo "    def initialize(self, args):" >> model.py && \
    echo "        pb_utils.Logger.log_info(f'[PB model] Loading version {args[\\"model_version\\"]}')" >> model.py && \
    mkdir 1 && cp model.py 1 && mkdir 2 && cp model.py 2 && mkdir 3 && mv model.py 3)
"""
    )
    args = "--model-repository=`pwd`/models --model-control-mode=explicit --load-model=*"
    os.environ["PYTHONDONTWRITEBYTECODE"] = "True"  # test.sh exports it for the server
    try:
        tests = ["test_load_new_model_version"]
        _run(ctx, "load_new_model_version", prep, args, tests, server_pid=True)
    finally:
        del os.environ["PYTHONDONTWRITEBYTECODE"]


STEPS: dict[str, Callable[[Context], None]] = {
    "parse_error_noexit": step_parse_error_noexit,
    "port_collisions": step_port_collisions,
    "model_control": step_model_control,
    "startup_model_errors": step_startup_model_errors,
    "model_availability": step_model_availability,
    "model_reload_fail": step_model_reload_fail,
    "control_api_in_poll_mode": step_control_api_in_poll_mode,
    "invalid_endpoints": step_invalid_endpoints,
    "overrides": step_overrides,
    "shutdown_inflight": step_shutdown_inflight,
    "load_gpu_limit_flags": step_load_gpu_limit_flags,
    "concurrent": step_concurrent,
    "load_retry": step_load_retry,
    "python_lifecycle": step_python_lifecycle,
}


def suite_l0_lifecycle(ctx: Context) -> None:
    """``L0_lifecycle/test.sh`` in its order, less what the module docstring leaves out;
    ``LIFECYCLE_STEPS`` chooses steps by name."""
    chosen = os.environ.get("LIFECYCLE_STEPS")
    names = chosen.split(",") if chosen else list(STEPS)
    for name in names:
        STEPS[name](ctx)
