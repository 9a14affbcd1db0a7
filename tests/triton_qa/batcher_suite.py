"""Triton's ``qa/L0_batcher`` (v2.51.0; v2.71 runs the same test files and steps) as its
``test.sh`` lays it out: test.sh's own preparation lines, cut from the tree's test.sh at
run time (``BLOCKS``) and run by bash in the suite folder, a fresh server per test (the statistics the tests read start at zero), each test of
``batcher_test.py`` run alone (``python batcher_test.py BatcherTest.test``, one case by
exit status, named with test.sh's model type), ``verify_timestamps.py`` over the trace
files of the ``preserve_ordering`` runs and ``queue_timeout_test.py`` as cases of their own.
As in test.sh, ``NO_DELAY_TESTS``, ``DELAY_TESTS``, ``DIFFERENT_SHAPE_TESTS``,
``PREFERRED_BATCH_ONLY_TESTS`` and ``MAX_QUEUE_DELAY_ONLY_TESTS`` (space-separated, when
set and not empty) select the tests of each list.

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
from collections.abc import Iterable
from pathlib import Path

import core_suites
from qa_shell import bash, block
from run import Context, Server, check, script, serving

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

#: test.sh's preparation blocks, cut from the tree's test.sh at run time (qa_shell.block):
#: for each, the marker its first line starts with, those of the lines it ends at (each
#: looked for after the one before) and, where the first marker recurs, the line it
#: follows. The same markers hold in v2.51's and v2.71's test.sh.
BLOCKS: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    # the models, preferred_batch_only_models and var_models repositories (through the
    # libtorch ragged model)
    "models": ("rm -fr *.log  models", ('if [[ $BACKENDS == *"libtorch"*', "fi"), None),
    "max_queue_delay_models": ("rm -fr ./custom_models", ('echo "]"',), None),
    # the per-test edit (its pattern wants brackets the line lacks: it changes nothing)
    "max_queue_delay_edit": (
        "(cd custom_models/custom_zero_1_float32",
        ('sed -i "s/max_queue_delay_microseconds:',),
        "for i in $MAX_QUEUE_DELAY_ONLY_TESTS",
    ),
    "preserve_ordering_models": (
        "rm -fr ./custom_models",
        ('echo "]"',),
        "TEST_CASE=test_multi_batch_preserve_ordering",
    ),
    "preserve_ordering_on": (
        "(cd custom_models/custom_zero_1_float32",
        ('sed -i "s/dynamic_batching',),
        "python3 $VERIFY_TIMESTAMPS not_preserve.log",
    ),
    "queue_timeout_models": ("rm -rf models", ("echo -e 'parameters [",), None),
}
#: The adaptation: test.sh's KIND_GPU instance groups made KIND_CPU (module docstring).
ON_CPU = "sed -i 's/KIND_GPU/KIND_CPU/' {}/custom_zero_1_float32/config.pbtxt"


def _lines(d: Path, name: str) -> str:
    """The block ``name`` of BLOCKS, cut from ``d/test.sh``."""
    first, last, after = BLOCKS[name]
    return block(d / "test.sh", first, *last, after=after)


def _selected(name: str, tests: Iterable[str]) -> list[str]:
    """The tests of list ``name``: ``$name`` (space-separated) where set and not empty, as
    test.sh reads it (``${NAME:=...}``), else ``tests``."""
    return os.environ.get(name, "").split() or list(tests)


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
    bash(d, _lines(d, "models") + ON_CPU.format("var_models"), **env)
    client = {"BACKENDS": env["BACKENDS"]}

    for model_type, repo in (("FIXED", "models"), ("VARIABLE", "var_models")):
        for case in _selected("NO_DELAY_TESTS", NO_DELAY_TESTS):
            _case(ctx, d, case, model_type, repo, BATCHER_TYPE=model_type, **client)
        for case in _selected("DELAY_TESTS", DELAY_TESTS):
            delay = DELAY_TESTS[case]
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
    for case in _selected("DIFFERENT_SHAPE_TESTS", DIFFERENT_SHAPE_TESTS):
        _case(ctx, d, case, "VARIABLE", "var_models", **variable)
    case = "test_multi_batch_delayed_preferred_different_shape"
    _case(ctx, d, case, "VARIABLE", "var_models", TRITONSERVER_DELAY_SCHEDULER="4", **variable)

    fixed = {"BATCHER_TYPE": "FIXED", **client}
    for case in _selected("PREFERRED_BATCH_ONLY_TESTS", PREFERRED_BATCH_ONLY_TESTS):
        delay = PREFERRED_BATCH_ONLY_TESTS[case]
        repo = "preferred_batch_only_models"
        label = "PREFERRED_BATCH_ONLY"
        _case(ctx, d, case, label, repo, TRITONSERVER_DELAY_SCHEDULER=delay, **fixed)

    bash(d, _lines(d, "max_queue_delay_models") + ON_CPU.format("custom_models"))
    for case in _selected("MAX_QUEUE_DELAY_ONLY_TESTS", MAX_QUEUE_DELAY_ONLY_TESTS):
        delay = MAX_QUEUE_DELAY_ONLY_TESTS[case]
        bash(d, _lines(d, "max_queue_delay_edit"), MAX_QUEUE_DELAY_MICROSECONDS=delay)
        _case(ctx, d, case, "MAX_QUEUE_DELAY_ONLY", "custom_models", **fixed)

    bash(d, _lines(d, "preserve_ordering_models") + ON_CPU.format("custom_models"))
    case = "test_multi_batch_preserve_ordering"
    for trial, flags in (("not_preserve", ()), ("preserve", ("-p",))):
        if trial == "preserve":
            bash(d, _lines(d, "preserve_ordering_on"))
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

    bash(d, _lines(d, "queue_timeout_models"))
    args = [f"--model-repository={d / 'models'}", "--log-verbose=2"]
    with serving(ctx, S, args, d / "queue_timeout_test.server.log", verbose=False):
        script(ctx, S, d, "queue_timeout_test.py")
