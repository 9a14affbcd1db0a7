"""Triton's ``qa/L0_sequence_batcher`` (v2.51.0; v2.71's test.sh where they differ: no
TensorFlow backend config, BACKENDS "onnx plan libtorch custom python") as its
``test.sh`` lays it out: test.sh's own model preparation lines (its ``MODELS`` loops over
``qa_sequence_model_repository``, ``qa_variable_sequence_model_repository`` and the
ensembles of ``qa_ensemble_model_repository``, ``generate_python_models``), cut from the
tree's test.sh at run time (``_preparation``, ``BLOCKS``) and run by bash in the suite
folder, a fresh server per test and model repository with the same
``TRITONSERVER_DELAY_SCHEDULER`` / ``TRITONSERVER_BACKLOG_DELAY_SCHEDULER`` values, and
the unchanged ``sequence_batcher_test.py`` run one test at a time (one case each, by exit
status), named ``<test> (<repository>)``.

The ``/data/inferenceserver`` repositories are made by Triton's generators
(``gen_qa_sequence_models.py`` with ``--onnx --libtorch``, the same with ``--variable``,
``--ensemble`` and ``--ensemble --variable``, as ``gen_qa_model_repository`` runs them)
and linked into a DATADIR of the work folder.

Selectable by environment (test.sh's own ``BACKENDS``, ``ENSEMBLES``, ``MODEL_TRIALS``):

- ``SEQUENCE_BACKENDS`` (default ``onnx libtorch custom python``; TensorRT's ``plan`` models
  cannot run on this machine, nor TensorFlow's). Triton 2.51's CPU build here serves only
  ``python``, with ``SEQUENCE_ENSEMBLES=0`` (its ensembles need the ``identity`` backend).
- ``SEQUENCE_ENSEMBLES`` (default 1).
- ``SEQUENCE_MODEL_TRIALS`` (default ``0 4 v``, about 20 minutes on a 2-core machine;
  test.sh's ``0 1 2 4 v`` would take over half an hour; ``0 v`` is what test.sh itself
  runs under ``TEST_JETSON``). The trials left out, ``1`` and ``2`` (one instance of
  batch 4, two of batch 2), run the same tests.

Adaptations (preparation only):

- ``KIND_GPU`` -> ``KIND_CPU`` in every model config after test.sh's lines ran (the
  generators write ``KIND_GPU``; Triton's CPU-only runs do the same), keeping the
  ``count`` test.sh inserts; the ensembles' ``nop_*`` models stay ``KIND_CPU`` where
  test.sh moves them to ``KIND_GPU`` (to avoid a CUDA start-up delay).
- ``custom_sequence_int32`` gets the version folder Dockerfile.QA makes for it, without
  ``libtriton_sequence.so`` (a server finds its ``sequence`` backend).

Not run: test.sh's valgrind and shared-memory variants (``TEST_VALGRIND``,
``TEST_SYSTEM_SHARED_MEMORY``, ``TEST_CUDA_SHARED_MEMORY``), and the implicit-state
variants (L0_sequence_batcher run with ``IMPLICIT_STATE=1``, another CI job).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import core_suites
from qa_shell import bash, block
from run import Context, Server, check

#: The folder of ``qa/`` this suite uses (copied into the work folder); it also uses
#: ``custom_models`` (LIFECYCLE_FOLDERS names it) and ``python_models``.
SEQUENCE_FOLDERS = ("L0_sequence_batcher",)

SUITE = "L0_sequence_batcher"
TEST = "sequence_batcher_test.py"

NO_DELAY_TESTS = (
    "test_simple_sequence",
    "test_length1_sequence",
    "test_batch_size",
    "test_no_sequence_start",
    "test_no_sequence_start2",
    "test_no_sequence_end",
    "test_no_correlation_id",
)
#: The tests that run under a delayed scheduler, with test.sh's
#: (TRITONSERVER_DELAY_SCHEDULER, TRITONSERVER_BACKLOG_DELAY_SCHEDULER) for each.
DELAY_TESTS = {
    "test_backlog_fill": (10, 2),
    "test_backlog_fill_no_end": (10, 3),
    "test_backlog_same_correlation_id": (12, 2),
    "test_backlog_same_correlation_id_no_end": (16, 0),
    "test_backlog_sequence_timeout": (4, 0),
    "test_half_batch": (8, 0),
    "test_skip_batch": (12, 0),
    "test_full_batch": (12, 0),
    "test_ragged_batch": (12, 0),
    "test_backlog": (12, 0),
}
QUEUE_DELAY_TESTS = (
    "test_queue_delay_no_min_util",
    "test_queue_delay_half_min_util",
    "test_queue_delay_full_min_util",
)

#: test.sh's shell defaults its preparation lines read.
PREPARATION_ENV = {
    "IMPLICIT_STATE": "0",
    "INITIAL_STATE_FILE": "0",
    "INITIAL_STATE_ZERO": "0",
    "USE_SINGLE_BUFFER": "0",
    "TEST_VALGRIND": "0",
}
#: The adaptations of the module docstring: the version folder before test.sh's lines
#: copy the model, KIND_CPU after them.
VERSION_FOLDER = "mkdir -p ../custom_models/custom_sequence_int32/1\n"
ON_CPU = r"""
for config in */*/config.pbtxt; do sed -i 's/KIND_GPU/KIND_CPU/' "$config"; done
"""
#: test.sh's later preparation blocks, cut from the tree's test.sh at run time
#: (qa_shell.block): for each, the marker its first line starts with, those of the lines it
#: ends at (each looked for after the one before) and, where the first marker recurs, the
#: line it follows. The same markers hold in v2.51's and v2.71's test.sh.
BLOCKS: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "util": ("source ../common/util.sh", (), None),
    "repositories": (
        "FIXED_MODEL_REPOSITORY=''",
        ('VAR_MODEL_REPOSITORY="qa_variable_sequence_model_repository"', "fi"),
        None,
    ),
    # per trial: the ensembles' nop models (left KIND_CPU, see above)
    "nop_models": (
        "cp -r $DATADIR/qa_ensemble_model_repository/",
        ("create_nop_version_dir",),
        None,
    ),
    "ragged_models": ("rm -fr ragged_models", ('sed -i "s/name:.*\\"INPUT\\"',), None),
    "timeout_models": (
        "MODEL_PATH=request_timeout_models",
        ("mkdir -p ${MODEL_PATH}/custom_sequence_int32_timeout",),
        None,
    ),
    "preserve_ordering_models": ("MODEL_PATH=preserve_ordering_models", ("done",), None),
}


def _lines(d: Path, *names: str) -> str:
    """The blocks ``names`` of BLOCKS, cut from ``d/test.sh``, one after the other."""
    return "".join(
        block(d / "test.sh", BLOCKS[name][0], *BLOCKS[name][1], after=BLOCKS[name][2])
        for name in names
    )


def _datadir(ctx: Context) -> Path:
    """``/data/inferenceserver/<version>`` with the repositories this suite reads, each
    a link to the models Triton's generator makes (model paths hold no generator flag,
    which test.sh's ``libtorch.*object`` and ``python`` matches would see)."""
    data = ctx.work / "data" / "inferenceserver"
    ensembles = data / "qa_ensemble_model_repository"
    ensembles.mkdir(parents=True, exist_ok=True)
    for link, flags in (
        (data / "qa_sequence_model_repository", ("--onnx", "--libtorch")),
        (data / "qa_variable_sequence_model_repository", ("--onnx", "--libtorch", "--variable")),
        (ensembles / "qa_sequence_model_repository", ("--ensemble",)),
        (ensembles / "qa_variable_sequence_model_repository", ("--ensemble", "--variable")),
    ):
        if not link.exists():
            link.symlink_to(core_suites.generated(ctx, "gen_qa_sequence_models.py", *flags))
    return data


def _preparation(d: Path) -> str:
    """test.sh's lines from the creation of models{0,1,2,4} to the trial loop: its
    functions, the MODELS lists and the copies with their config edits."""
    text = (d / "test.sh").read_text()
    start = text.index("rm -fr *.log  models{0,1,2,4}")
    return text[start : text.index("# Same test work on all models")]


def _run(ctx: Context, d: Path, repo: str, cases: list[str], env: dict[str, str], tag: str) -> None:
    """``cases`` (``Class.test``) one by one under one server of ``repo`` started with
    ``env`` (test.sh's exports), each a case named after its test and repository."""
    log = d / f"{tag}.{repo}.server.log"
    server = Server(ctx, [f"--model-repository={d / repo}"], log, env=env)
    try:
        if not server.started:
            check(ctx, SUITE, f"server starts ({log.name})", False, server.log_text()[-1500:])
            return
        for case in cases:
            core_suites.unittest_case(ctx, SUITE, d, TEST, case, **env)
            ctx.cases[SUITE][-1].name = f"{case.rsplit('.', 1)[-1]} ({repo})"
    finally:
        server.stop()


def _batcher(ctx: Context, d: Path, repo: str, test: str, env: dict[str, str]) -> None:
    _run(ctx, d, repo, [f"SequenceBatcherTest.{test}"], env, test)


def _delayed(shell: dict[str, str], delay: int, backlog: int) -> dict[str, str]:
    """``shell`` with test.sh's delayed-scheduler exports."""
    return dict(
        shell,
        TRITONSERVER_DELAY_SCHEDULER=str(delay),
        TRITONSERVER_BACKLOG_DELAY_SCHEDULER=str(backlog),
    )


def suite_l0_sequence_batcher(ctx: Context) -> None:
    """``L0_sequence_batcher/test.sh`` for the selected backends and model trials: the
    no-delay and delayed-scheduler tests per trial, the ragged custom model, the queue
    delay models, the request timeout and the preserve-ordering python models."""
    d = ctx.qa / SUITE
    backends = os.environ.get("SEQUENCE_BACKENDS", "onnx libtorch custom python")
    trials = os.environ.get("SEQUENCE_MODEL_TRIALS", "0 4 v").split()
    shell = {
        **PREPARATION_ENV,
        "BACKENDS": backends,
        "ENSEMBLES": os.environ.get("SEQUENCE_ENSEMBLES", "1"),
        "DATADIR": str(_datadir(ctx)),
    }
    bash(d, VERSION_FOLDER + _preparation(d) + ON_CPU, **shell)

    for trial in trials:
        shell["NO_BATCHING"] = "1" if trial == "0" else "0"
        shell["MODEL_INSTANCES"] = {"0": "4", "v": "1"}.get(trial, trial)
        shell["BATCHER_TYPE"] = "VARIABLE" if trial == "v" else "FIXED"
        repo = f"models{trial}"
        if shell["ENSEMBLES"] == "1":
            bash(d, _lines(d, "util", "repositories", "nop_models"), **shell, MODEL_PATH=repo)
        for test in NO_DELAY_TESTS:
            _batcher(ctx, d, repo, test, shell)
        for test, (delay, backlog) in DELAY_TESTS.items():
            _batcher(ctx, d, repo, test, _delayed(shell, delay, backlog))

    if "custom" in backends:
        bash(d, _lines(d, "ragged_models"), **shell)
        shell.update(NO_BATCHING="0", MODEL_INSTANCES="1", BATCHER_TYPE="FIXED")
        ragged = _delayed(shell, 12, 0)
        _batcher(ctx, d, "ragged_models", "test_ragged_batch_allowed", ragged)

    for prefix in ("simple_", "fan_", "sequence_"):  # test.sh: no ensembles here
        for model in (d / "queue_delay_models").glob(f"{prefix}*"):
            shutil.rmtree(model)
    shell["NO_BATCHING"] = "0"
    for test in QUEUE_DELAY_TESTS:
        _batcher(ctx, d, "queue_delay_models", test, _delayed(shell, 2, 0))

    shell.update(NO_BATCHING="0", MODEL_INSTANCES="1", BATCHER_TYPE="FIXED")
    bash(d, _lines(d, "timeout_models"), **shell)
    timeouts = [
        f"SequenceBatcherRequestTimeoutTest.{test}"
        for test in ("test_request_timeout", "test_send_request_after_timeout")
    ]
    _run(ctx, d, "request_timeout_models", timeouts, shell, "SequenceBatcherRequestTimeoutTest")

    if "python" in backends:
        bash(d, _lines(d, "preserve_ordering_models"), **shell)
        ordering = [
            f"SequenceBatcherPreserveOrderingTest.{test}"
            for test in (
                "test_sequence_with_preserve_ordering",
                "test_sequence_without_preserve_ordering",
            )
        ]
        tag = "SequenceBatcherPreserveOrderingTest"
        _run(ctx, d, "preserve_ordering_models", ordering, shell, tag)
