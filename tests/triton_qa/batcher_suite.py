"""Triton's ``qa/L0_batcher`` (v2.51.0; v2.71 runs the same test files and steps) as its
``test.sh`` lays it out: test.sh's own preparation lines run by bash in the suite folder,
a fresh server per test (the statistics the tests read start at zero), each test of
``batcher_test.py`` run alone (``python batcher_test.py BatcherTest.test``, one case by
exit status, named with test.sh's model type), ``verify_timestamps.py`` over the trace
files of the ``preserve_ordering`` runs and ``queue_timeout_test.py`` as cases of their own.

``$DATADIR`` holds the models of ``qa_model_repository``, ``qa_variable_model_repository``
and ``qa_identity_model_repository`` that test.sh copies, made by Triton's generators as
``qa/common/gen_qa_model_repository`` makes them (``gen_qa_models.py --onnx|--libtorch
[--variable]``, ``gen_qa_identity_models.py --onnx|--libtorch``).

Adaptations (preparation only):

- ``BACKENDS`` is ``onnx libtorch python`` (test.sh: ``graphdef savedmodel onnx libtorch
  plan python``; v2.71: ``onnx libtorch plan python``): TensorFlow and TensorRT cannot
  run on this machine. ``BATCHER_BACKENDS`` selects another list (Triton's CPU build here
  serves only ``python``).
- The ``KIND_GPU`` instance groups test.sh gives ``custom_zero_1_float32`` (the ragged
  model of ``var_models``, the max-queue-delay model, the two instances of the
  preserve-ordering model) are ``KIND_CPU``, as in Triton's CPU-only runs.
- test.sh's ``--backend-directory`` and ``--backend-config=tensorflow,...`` flags are
  left out (the server finds its own backends; v2.71 drops the TensorFlow one), and the
  trace files of the preserve-ordering runs are given by absolute path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import core_suites
from run import Context, Server, check, script, serving
from scheduling_suites import _bash

#: The folder of ``qa/`` this suite uses; it also uses ``custom_models`` and
#: ``python_models``, which the runner copies for other suites.
BATCHER_FOLDERS = ("L0_batcher",)

S = "L0_batcher"
TEST = "batcher_test.py"

NO_DELAY_TESTS = (
    "test_static_batch_preferred",
    "test_static_batch_lt_any_preferred",
    "test_static_batch_not_preferred",
    "test_static_batch_gt_max_preferred",
    "test_multi_batch_not_preferred",
    "test_multi_batch_gt_max_preferred",
    "test_multi_batch_sum_gt_max_preferred",
    "test_multi_same_output0",
    "test_multi_same_output1",
    "test_multi_different_outputs",
    "test_multi_different_output_order",
)
#: The tests that need TRITONSERVER_DELAY_SCHEDULER, with the value test.sh exports.
DELAY_TESTS = {
    "test_multi_batch_delayed_sum_gt_max_preferred": "2",
    "test_multi_batch_use_biggest_preferred": "6",
    "test_multi_batch_use_best_preferred": "3",
    "test_multi_batch_delayed_use_max_batch": "3",
}
DIFFERENT_SHAPE_TESTS = (
    "test_multi_batch_not_preferred_different_shape",
    "test_multi_batch_preferred_different_shape",
    "test_multi_batch_different_shape_allow_ragged",
    "test_multi_batch_different_shape",
)
PREFERRED_BATCH_ONLY_TESTS = {
    "test_preferred_batch_only_aligned": "4",
    "test_preferred_batch_only_unaligned": "5",
    "test_preferred_batch_only_use_biggest_preferred": "7",
    "test_preferred_batch_only_use_no_preferred_size": "3",
}
MAX_QUEUE_DELAY_ONLY_TESTS = {
    "test_max_queue_delay_only_default": "0",
    "test_max_queue_delay_only_non_default": "20000",
}

MODELS = r"""
rm -fr *.log  models && mkdir models
for BACKEND in $BACKENDS; do
    TMP_MODEL_DIR="$DATADIR/qa_model_repository/${BACKEND}_float32_float32_float32"
    if [ "$BACKEND" == "python" ]; then
        onnx_model="${DATADIR}/qa_model_repository/onnx_float32_float32_float32"
        python_model=`echo $onnx_model | sed 's/onnx/python/g' | sed 's,'"$DATADIR/qa_model_repository/"',,g'`
        mkdir -p models/$python_model/1/
        cat $onnx_model/config.pbtxt | sed 's/platform:.*/backend:\ "python"/g' | sed 's/onnx/python/g' > models/$python_model/config.pbtxt
        cp $onnx_model/output0_labels.txt models/$python_model
        cp ../python_models/add_sub/model.py models/$python_model/1/
    else
        cp -r $TMP_MODEL_DIR models/.
    fi
    (cd models/$(basename $TMP_MODEL_DIR) && \
          sed -i "s/^max_batch_size:.*/max_batch_size: 8/" config.pbtxt && \
          sed -i "s/^version_policy:.*/version_policy: { specific { versions: [1] }}/" config.pbtxt && \
          echo "dynamic_batching { preferred_batch_size: [ 2, 6 ], max_queue_delay_microseconds: 10000000 }" >> config.pbtxt)
done

rm -fr preferred_batch_only_models && mkdir preferred_batch_only_models
for BACKEND in $BACKENDS; do
    TMP_MODEL_DIR="$DATADIR/qa_model_repository/${BACKEND}_float32_float32_float32"
    if [ "$BACKEND" == "python" ]; then
        onnx_model="${DATADIR}/qa_model_repository/onnx_float32_float32_float32"
        python_model=`echo $onnx_model | sed 's/onnx/python/g' | sed 's,'"$DATADIR/qa_model_repository/"',,g'`
        mkdir -p preferred_batch_only_models/$python_model/1/
        cat $onnx_model/config.pbtxt | sed 's/platform:.*/backend:\ "python"/g' | sed 's/onnx/python/g' > preferred_batch_only_models/$python_model/config.pbtxt
        cp $onnx_model/output0_labels.txt preferred_batch_only_models/$python_model
        cp ../python_models/add_sub/model.py preferred_batch_only_models/$python_model/1/
    else
        cp -r $TMP_MODEL_DIR preferred_batch_only_models/.
    fi
    (cd preferred_batch_only_models/$(basename $TMP_MODEL_DIR) && \
          sed -i "s/^max_batch_size:.*/max_batch_size: 8/" config.pbtxt && \
          sed -i "s/^version_policy:.*/version_policy: { specific { versions: [1] }}/" config.pbtxt && \
          echo "dynamic_batching { preferred_batch_size: [ 4, 6 ] }" >> config.pbtxt)
done

rm -fr var_models && mkdir var_models
for BACKEND in $BACKENDS; do
    TMP_MODEL_DIR="$DATADIR/qa_variable_model_repository/${BACKEND}_float32_float32_float32"
    if [ "$BACKEND" == "python" ]; then
        onnx_model="${DATADIR}/qa_variable_model_repository/onnx_float32_float32_float32"
        python_model=`echo $onnx_model | sed 's/onnx/python/g' | sed 's,'"$DATADIR/qa_variable_model_repository/"',,g'`
        mkdir -p var_models/$python_model/1/
        cat $onnx_model/config.pbtxt | sed 's/platform:.*/backend:\ "python"/g' | sed 's/onnx/python/g' > var_models/$python_model/config.pbtxt
        cp $onnx_model/output0_labels.txt var_models/$python_model
        cp ../python_models/add_sub/model.py var_models/$python_model/1/
    else
        cp -r $TMP_MODEL_DIR var_models/.
    fi
    (cd var_models/$(basename $TMP_MODEL_DIR) && \
            sed -i "s/^max_batch_size:.*/max_batch_size: 8/" config.pbtxt && \
            sed -i "s/^version_policy:.*/version_policy: { specific { versions: [1] }}/" config.pbtxt && \
            echo "dynamic_batching { preferred_batch_size: [ 2, 6 ], max_queue_delay_microseconds: 10000000 }" >> config.pbtxt)
done

for MC in `ls var_models/*/config.pbtxt`; do
    sed -i "s/16/-1/g" $MC
done

cp -r ../custom_models/custom_zero_1_float32 var_models/. && \
    (cd var_models/custom_zero_1_float32 && mkdir 1 && \
        echo "instance_group [ { kind: KIND_GPU count: 1 }]" >> config.pbtxt && \
        sed -i "s/^max_batch_size:.*/max_batch_size: 8/" config.pbtxt && \
        sed -i "s/dims:.*\[.*\]/dims: \[ -1 \]/g" config.pbtxt && \
        sed -i "s/name:.*\"INPUT0\"/name: \"INPUT0\"\\nallow_ragged_batch: true/" config.pbtxt && \
        sed -i "s/^version_policy:.*/version_policy: { specific { versions: [1] }}/" config.pbtxt && \
        echo "dynamic_batching { preferred_batch_size: [ 2, 6 ], max_queue_delay_microseconds: 10000000 }" >> config.pbtxt)

if [[ $BACKENDS == *"onnx"* ]]; then
    cp -r $DATADIR/qa_identity_model_repository/onnx_nobatch_zero_1_float32 var_models/onnx_zero_1_float32 && \
        (cd var_models/onnx_zero_1_float32 && \
            sed -i "s/nobatch_//" config.pbtxt && \
            sed -i "s/^max_batch_size:.*/max_batch_size: 8/" config.pbtxt && \
            sed -i "s/name: \"INPUT0\"/name: \"INPUT0\"\\nallow_ragged_batch: true/" config.pbtxt && \
            echo "batch_output [{target_name: \"OUTPUT0\" \
                                    kind: BATCH_SCATTER_WITH_INPUT_SHAPE \
                                    source_input: \"INPUT0\" }] \
                    dynamic_batching { preferred_batch_size: [ 2, 6 ], max_queue_delay_microseconds: 10000000 }" >> config.pbtxt)
fi

if [[ $BACKENDS == *"libtorch"* ]]; then
    cp -r $DATADIR/qa_identity_model_repository/libtorch_nobatch_zero_1_float32 var_models/libtorch_zero_1_float32 && \
        (cd var_models/libtorch_zero_1_float32 && \
            sed -i "s/nobatch_//" config.pbtxt && \
            sed -i "s/^max_batch_size:.*/max_batch_size: 8/" config.pbtxt && \
            sed -i "s/name: \"INPUT__0\"/name: \"INPUT__0\"\\nallow_ragged_batch: true/" config.pbtxt && \
            echo "batch_output [{target_name: \"OUTPUT__0\" \
                                    kind: BATCH_SCATTER_WITH_INPUT_SHAPE \
                                    source_input: \"INPUT__0\" }] \
                    dynamic_batching { preferred_batch_size: [ 2, 6 ], max_queue_delay_microseconds: 10000000 }" >> config.pbtxt)
fi
"""
MAX_QUEUE_DELAY_MODELS = r"""
rm -fr ./custom_models && mkdir ./custom_models && \
cp -r ../custom_models/custom_zero_1_float32 ./custom_models/. && \
mkdir -p ./custom_models/custom_zero_1_float32/1

(cd custom_models/custom_zero_1_float32 && \
        sed -i "s/dims:.*\[.*\]/dims: \[ -1 \]/g" config.pbtxt && \
        sed -i "s/max_batch_size:.*/max_batch_size: 100/g" config.pbtxt && \
        echo "dynamic_batching { max_queue_delay_microseconds: 0}" >> config.pbtxt && \
        echo "instance_group [ { kind: KIND_GPU } ]" >> config.pbtxt && \
        echo "parameters [" >> config.pbtxt && \
        echo "{ key: \"execute_delay_ms\"; value: { string_value: \"100\" }}" >> config.pbtxt && \
        echo "]" >> config.pbtxt)
"""
#: test.sh's per-test edit (its pattern wants brackets the line lacks: it changes nothing).
MAX_QUEUE_DELAY_EDIT = r"""
(cd custom_models/custom_zero_1_float32 && \
    sed -i "s/max_queue_delay_microseconds:.*\[.*\]/max_queue_delay_microseconds: ${MAX_QUEUE_DELAY_MICROSECONDS}/g" config.pbtxt )
"""
PRESERVE_ORDERING_MODELS = r"""
rm -fr ./custom_models && mkdir ./custom_models && \
    cp -r ../custom_models/custom_zero_1_float32 ./custom_models/. && \
    mkdir -p ./custom_models/custom_zero_1_float32/1

(cd custom_models/custom_zero_1_float32 && \
        sed -i "s/dims:.*\[.*\]/dims: \[ -1 \]/g" config.pbtxt && \
        sed -i "s/max_batch_size:.*/max_batch_size: 4/g" config.pbtxt && \
        echo "dynamic_batching { preferred_batch_size: [ 4 ] }" >> config.pbtxt && \
        echo "instance_group [ { kind: KIND_GPU count: 2 }]" >> config.pbtxt && \
        echo "parameters [" >> config.pbtxt && \
        echo "{ key: \"execute_delay_ms\"; value: { string_value: \"100\" }}," >> config.pbtxt && \
        echo "{ key: \"instance_wise_delay_multiplier\"; value: { string_value: \"4\" }}" >> config.pbtxt && \
        echo "]" >> config.pbtxt)
"""
PRESERVE_ORDERING_ON = r"""
(cd custom_models/custom_zero_1_float32 && \
        sed -i "s/dynamic_batching.*/dynamic_batching { preferred_batch_size: [ 4 ] preserve_ordering: true }/g" config.pbtxt)
"""
QUEUE_TIMEOUT_MODELS = r"""
rm -rf models && mkdir models
mkdir -p models/dynamic_batch/1 && (cd models/dynamic_batch && \
    echo 'backend: "identity"' >> config.pbtxt && \
    echo 'max_batch_size: 1' >> config.pbtxt && \
    echo -e 'input [{ name: "INPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]' >> config.pbtxt && \
    echo -e 'output [{ name: "OUTPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]' >> config.pbtxt && \
    echo -e 'instance_group [{ count: 1 \n kind: KIND_CPU }]' >> config.pbtxt && \
    echo -e 'dynamic_batching {' >> config.pbtxt && \
    echo -e '  preferred_batch_size: [ 1 ]' >> config.pbtxt && \
    echo -e '  default_queue_policy { timeout_action: REJECT \n default_timeout_microseconds: 1000000 \n max_queue_size: 8 }' >> config.pbtxt && \
    echo -e '}' >> config.pbtxt && \
    echo -e 'parameters [{ key: "execute_delay_ms" \n value: { string_value: "8000" } }]' >> config.pbtxt)
"""
#: The adaptation: test.sh's KIND_GPU instance groups made KIND_CPU (module docstring).
ON_CPU = "sed -i 's/KIND_GPU/KIND_CPU/' {}/custom_zero_1_float32/config.pbtxt"


def backends() -> str:
    """test.sh's ``BACKENDS`` here: ``$BATCHER_BACKENDS``, else the three this machine runs."""
    return os.environ.get("BATCHER_BACKENDS", "onnx libtorch python")


def datadir(ctx: Context) -> Path:
    """``$DATADIR`` with the generated models test.sh copies: the ONNX ones always (the
    python models take their configs), the libtorch ones when ``BACKENDS`` names it."""
    data = ctx.work / "data" / "batcher"
    if data.is_dir():
        return data
    frameworks = ["onnx", *(["libtorch"] if "libtorch" in backends().split() else [])]
    for repo, generator, flags, name in (
        ("qa_model_repository", "gen_qa_models.py", (), "{}_float32_float32_float32"),
        (
            "qa_variable_model_repository",
            "gen_qa_models.py",
            ("--variable",),
            "{}_float32_float32_float32",
        ),
        (
            "qa_identity_model_repository",
            "gen_qa_identity_models.py",
            (),
            "{}_nobatch_zero_1_float32",
        ),
    ):
        for framework in frameworks:
            models = core_suites.generated(ctx, generator, f"--{framework}", *flags)
            shutil.copytree(models / name.format(framework), data / repo / name.format(framework))
    return data


def _case(
    ctx: Context,
    d: Path,
    case: str,
    label: str,
    repo: str,
    *extra: str,
    **env: str,
) -> None:
    """``BatcherTest.<case>`` under a fresh server of ``d/<repo>`` (``extra`` flags, ``env``
    for server and client as test.sh exports it), recorded as ``<case> (<label>)``."""
    log = d / f"{case}.{label}.server.log"
    args = [f"--model-repository={d / repo}", *extra]
    server = Server(ctx, args, log, env=env, verbose=False)
    try:
        if not server.started:
            check(ctx, S, f"server starts ({log.name})", False, server.log_text()[-1500:])
            return
        core_suites.unittest_case(
            ctx, S, d, TEST, f"BatcherTest.{case}", label=f"{case} ({label})", **env
        )
    finally:
        server.stop()


def _verify_timestamps(ctx: Context, d: Path, trace: Path, *flags: str) -> None:
    """``python3 verify_timestamps.py [-p] <trace>``: one case, by exit status."""
    proc = subprocess.run(
        [ctx.client_python, "verify_timestamps.py", *flags, str(trace)],
        cwd=d,
        capture_output=True,
        text=True,
    )
    name = f"verify_timestamps.py {' '.join((*flags, trace.name))}"
    check(ctx, S, name, proc.returncode == 0, (proc.stdout + proc.stderr)[-1000:])


def suite_l0_batcher(ctx: Context) -> None:
    """``L0_batcher/test.sh``: the no-delay and scheduler-delay tests on the fixed- and
    variable-shape models, the different-shape and ragged tests, preferred-only batch
    sizes, max queue delay only, ``preserve_ordering`` off and on (with the trace checks)
    and the prompt queue timeout."""
    d = ctx.qa / S
    env = {"BACKENDS": backends(), "DATADIR": str(datadir(ctx))}
    _bash(d, MODELS + ON_CPU.format("var_models"), **env)
    client = {"BACKENDS": env["BACKENDS"]}

    for model_type, repo in (("FIXED", "models"), ("VARIABLE", "var_models")):
        for case in NO_DELAY_TESTS:
            _case(ctx, d, case, model_type, repo, BATCHER_TYPE=model_type, **client)
        for case, delay in DELAY_TESTS.items():
            _case(
                ctx,
                d,
                case,
                model_type,
                repo,
                BATCHER_TYPE=model_type,
                TRITONSERVER_DELAY_SCHEDULER=delay,
                **client,
            )
    variable = {"BATCHER_TYPE": "VARIABLE", **client}
    for case in DIFFERENT_SHAPE_TESTS:
        _case(ctx, d, case, "VARIABLE", "var_models", **variable)
    case = "test_multi_batch_delayed_preferred_different_shape"
    _case(ctx, d, case, "VARIABLE", "var_models", TRITONSERVER_DELAY_SCHEDULER="4", **variable)

    fixed = {"BATCHER_TYPE": "FIXED", **client}
    for case, delay in PREFERRED_BATCH_ONLY_TESTS.items():
        repo = "preferred_batch_only_models"
        label = "PREFERRED_BATCH_ONLY"
        _case(ctx, d, case, label, repo, TRITONSERVER_DELAY_SCHEDULER=delay, **fixed)

    _bash(d, MAX_QUEUE_DELAY_MODELS + ON_CPU.format("custom_models"))
    for case, delay in MAX_QUEUE_DELAY_ONLY_TESTS.items():
        _bash(d, MAX_QUEUE_DELAY_EDIT, MAX_QUEUE_DELAY_MICROSECONDS=delay)
        _case(ctx, d, case, "MAX_QUEUE_DELAY_ONLY", "custom_models", **fixed)

    _bash(d, PRESERVE_ORDERING_MODELS + ON_CPU.format("custom_models"))
    case = "test_multi_batch_preserve_ordering"
    for trial, flags in (("not_preserve", ()), ("preserve", ("-p",))):
        if trial == "preserve":
            _bash(d, PRESERVE_ORDERING_ON)
        trace = d / f"{trial}.log"
        tracing = (f"--trace-file={trace}", "--trace-level=MIN", "--trace-rate=1")
        _case(
            ctx,
            d,
            case,
            trial,
            "custom_models",
            *tracing,
            TRITONSERVER_DELAY_SCHEDULER="12",
            **fixed,
        )
        _verify_timestamps(ctx, d, trace, *flags)

    _bash(d, QUEUE_TIMEOUT_MODELS)
    args = [f"--model-repository={d / 'models'}", "--log-verbose=2"]
    with serving(ctx, S, args, d / "queue_timeout_test.server.log", verbose=False):
        script(ctx, S, d, "queue_timeout_test.py")
