"""Triton's ``qa/L0_rate_limiter`` and ``qa/L0_response_cache`` (v2.51.0) as their
``test.sh`` lay them out: test.sh's own cp/sed/echo preparation lines run by bash in the
suite folder, the same server flags, the unchanged test files run one test at a time
(``python file.py Class.test``, one case each, by exit status), and test.sh's checks of a
server that must not start (and the text its log must hold) as cases of their own.

Adaptations (preparation only), by suite:

- L0_rate_limiter: the two instance groups test.sh gives ``custom_zero_1_float32`` (and
  its ``_v2``) are ``KIND_GPU`` on ``CUDA_VISIBLE_DEVICES=0``; here they are made
  ``KIND_CPU`` after test.sh's lines ran (a CPU instance, like a GPU 0 one, has device
  id 0, so the device-specific resource checks read the same). ``custom_sequence_int32``
  gets the version folder Dockerfile.QA makes for it, without ``libtriton_sequence.so``
  (a server finds its sequence backend).
- L0_response_cache: the ensemble tests' ``simple_graphdef_float32_float32_float32``
  and ``graphdef_float32_float32_float32`` (TensorFlow GraphDefs of
  ``/data/inferenceserver``, which ``ensemble_cache_test.py`` names) are the ONNX models
  ``gen_qa_models.py --onnx --ensemble`` makes (``simple_onnx_float32_float32_float32``,
  ``onnx_float32_float32_float32``) under the GraphDef names: the tests read only
  statistics and outputs. Redis runs on 127.0.0.1:6379 (test.sh: ``localhost``).

Left out: L0_response_cache's ``response_cache_test`` (a C++ unit-test binary built
against Triton's core and cache libraries).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import core_suites
from qa_shell import bash as _bash
from run import Context, Server, check

#: The folders of ``qa/`` these suites use (copied into the work folder); they also use
#: ``custom_models``, which LIFECYCLE_FOLDERS names.
SCHEDULING_FOLDERS = ("L0_rate_limiter", "L0_response_cache")


def _must_not_start(
    ctx: Context, suite: str, args: Sequence[str], log: Path, *needles: str, **env: str
) -> None:
    """test.sh's ``run_server`` that must fail, then ``grep -i`` of its log for any of
    ``needles``: two cases."""
    server = Server(ctx, args, log, env=env, verbose=False)
    started = server.started
    server.stop()
    check(ctx, suite, f"{log.name}: server does not start", not started)
    text = server.log_text().lower()
    found = any(needle.lower() in text for needle in needles)
    errors = [line for line in text.splitlines() if line.startswith("e")]
    check(ctx, suite, f"{log.name}: log has {' or '.join(needles)!r}", found, str(errors[-3:]))


def _must_start(ctx: Context, suite: str, args: Sequence[str], log: Path, **env: str) -> None:
    """test.sh's ``run_server`` then ``check_server_success_and_kill``: one case."""
    server = Server(ctx, args, log, env=env, verbose=False)
    started = server.started
    server.stop()
    check(ctx, suite, f"{log.name}: server starts", started, server.log_text()[-1500:])


def _unittest(
    ctx: Context,
    suite: str,
    d: Path,
    target: str,
    case: str,
    args: Sequence[str],
    tag: str,
    **env: str,
) -> float:
    """``case`` under a server started with ``args`` and logging to
    ``inference_server.<tag>.log`` (its start a case when it fails); the seconds the
    client ran (test.sh's ``SECONDS``)."""
    log = d / f"inference_server.{tag}.log"
    server = Server(ctx, args, log, env=env, verbose=False)
    start = time.monotonic()
    try:
        if not server.started:
            check(ctx, suite, f"server starts ({log.name})", False, server.log_text()[-1500:])
            return 0.0
        core_suites.unittest_case(ctx, suite, d, target, case, **env)
        return time.monotonic() - start
    finally:
        server.stop()


RATE_LIMITER_MODELS = r"""
rm -fr ./custom_models && mkdir ./custom_models && \
cp -r ../custom_models/custom_zero_1_float32 ./custom_models/. && \
cp -r ../custom_models/custom_sequence_int32 ./custom_models/. && \
mkdir -p ./custom_models/custom_zero_1_float32/1 && \
cp -r ./custom_models/custom_zero_1_float32 ./custom_models/custom_zero_1_float32_v2
# Dockerfile.QA gives qa/custom_models/custom_sequence_int32 its version folder
mkdir -p ./custom_models/custom_sequence_int32/1

(cd custom_models/custom_zero_1_float32 && \
        sed -i "s/dims:.*\[.*\]/dims: \[ -1 \]/g" config.pbtxt && \
        sed -i "s/max_batch_size:.*/max_batch_size: 4/g" config.pbtxt && \
        echo "instance_group [{"  >> config.pbtxt && \
        echo "kind: KIND_GPU count: 1"  >> config.pbtxt && \
        echo "rate_limiter { resources [{name: \"resource1\" count: 4 }]}"  >> config.pbtxt && \
        echo "}]" >> config.pbtxt && \
        echo "parameters [" >> config.pbtxt && \
        echo "{ key: \"execute_delay_ms\"; value: { string_value: \"100\" }}" >> config.pbtxt && \
        echo "]" >> config.pbtxt)

(cd custom_models/custom_zero_1_float32_v2 && \
        sed -i "s/custom_zero_1_float32/custom_zero_1_float32_v2/g" config.pbtxt && \
        sed -i "s/dims:.*\[.*\]/dims: \[ -1 \]/g" config.pbtxt && \
        sed -i "s/max_batch_size:.*/max_batch_size: 4/g" config.pbtxt && \
        echo "instance_group [{"  >> config.pbtxt && \
        echo "kind: KIND_GPU count: 1"  >> config.pbtxt && \
        echo "rate_limiter { resources [{name: \"resource1\" count: 2 }, {name: \"resource2\" global: True count: 2 }] priority: 2}"  >> config.pbtxt && \
        echo "}]" >> config.pbtxt && \
        echo "parameters [" >> config.pbtxt && \
        echo "{ key: \"execute_delay_ms\"; value: { string_value: \"100\" }}" >> config.pbtxt && \
        echo "]" >> config.pbtxt)
"""
RATE_LIMITER_CONFLICT = r"""
cp -r ./custom_models/custom_zero_1_float32_v2 ./custom_models/custom_zero_1_float32_v3
(cd custom_models/custom_zero_1_float32_v3 && \
        sed -i "s/custom_zero_1_float32_v2/custom_zero_1_float32_v3/g" config.pbtxt && \
        sed -i "s/global: True/global: False/g " config.pbtxt)
"""
RATE_LIMITER_TWO_INSTANCES = r"""
rm -rf custom_models/custom_zero_1_float32_v2
(cd custom_models/custom_zero_1_float32 && \
        echo "instance_group [{"  >> config.pbtxt && \
        echo "kind: KIND_GPU count: 1"  >> config.pbtxt && \
        echo "rate_limiter { resources [{name: \"resource1\" count: 2 }, {name: \"resource2\" global: True count: 2 }] priority: 2}"  >> config.pbtxt && \
        echo "}]" >> config.pbtxt)
"""
RATE_LIMITER_DYNAMIC = r"""
(cd custom_models/custom_zero_1_float32 && \
        sed -i "s/.*execute_delay_ms.*/{ key: \"execute_delay_ms\"; value: { string_value: \"1000\" }}/g" config.pbtxt && \
        echo "dynamic_batching { preferred_batch_size: [ 1, 2, 3, 4 ]" >> config.pbtxt && \
        echo " max_queue_delay_microseconds: 5000000 }"  >> config.pbtxt)
"""
RATE_LIMITER_SEQUENCE = r"""
FIRST_INSTANCE_RESOURCE="rate_limiter { resources [{name: \"resource1\" count: 4 }]}"
(cd custom_models/custom_sequence_int32/ && \
        sed -i "s/max_sequence_idle_microseconds:.*/max_sequence_idle_microseconds: 1000000/" config.pbtxt && \
        sed -i "s/^max_batch_size:.*/max_batch_size: 1/" config.pbtxt && \
        sed -i "s/kind: KIND_GPU/kind: KIND_CPU\\ncount: 1 \n${FIRST_INSTANCE_RESOURCE}/" config.pbtxt && \
        sed -i "s/kind: KIND_CPU/kind: KIND_CPU\\ncount: 1 \n${FIRST_INSTANCE_RESOURCE}/" config.pbtxt &&\
        echo "instance_group [{"  >> config.pbtxt && \
        echo "kind: KIND_CPU count: 1"  >> config.pbtxt && \
        echo "rate_limiter { resources [{name: \"resource1\" count: 2 }, {name: \"resource2\" global: True count: 2 }] priority: 2}"  >> config.pbtxt && \
        echo "}]" >> config.pbtxt && \
        echo "instance_group [{"  >> config.pbtxt && \
        echo "kind: KIND_CPU count: 2"  >> config.pbtxt && \
        echo "rate_limiter { resources [{name: \"resource1\" count: 2 }, {name: \"resource2\" global: True count: 2 }] priority: 3}"  >> config.pbtxt && \
        echo "}]" >> config.pbtxt)
"""
#: The adaptation: test.sh's KIND_GPU instance groups made KIND_CPU (module docstring).
ON_CPU = "sed -i 's/KIND_GPU/KIND_CPU/' custom_models/*/config.pbtxt"


def suite_l0_rate_limiter(ctx: Context) -> None:
    """``L0_rate_limiter/test.sh``: four servers that must fail to load the models (each
    with its log text), cross-model prioritization with limited and plenty resources,
    two instances of one model (limited, plenty: the limited run takes no less time),
    dynamic batching under ``TRITONSERVER_DELAY_SCHEDULER=8`` and sequence batching."""
    s, d = "L0_rate_limiter", ctx.qa / "L0_rate_limiter"
    _bash(d, RATE_LIMITER_MODELS + ON_CPU)
    repo, test = f"--model-repository={d / 'custom_models'}", "rate_limiter_test.py"
    limit = "--rate-limit=execution_count"
    short = (
        'Resource count for "resource1" is limited to {} which will prevent scheduling of '
        "one or more model instances, the minimum required count is 4"
    )
    for tag, flags, count in (
        ("r1", ["--rate-limit-resource=resource1:1"], 1),
        ("r3", ["--rate-limit-resource=resource1:3", "--rate-limit-resource=resource2:2"], 3),
        (
            "rdevice",
            ["--rate-limit-resource=resource1:10:10", "--rate-limit-resource=resource2:2"],
            0,
        ),
    ):
        log = d / f"inference_server_{tag}.log"
        _must_not_start(ctx, s, [limit, *flags, repo], log, short.format(count))
    _bash(d, RATE_LIMITER_CONFLICT + ON_CPU)
    _must_not_start(
        ctx,
        s,
        [limit, repo],
        d / "inference_server_conflict.log",
        'Resource "resource2" is present as both global and device-specific resource in '
        "the model configuration.",
    )
    shutil.rmtree(d / "custom_models/custom_zero_1_float32_v3")

    limited = ["--rate-limit-resource=resource1:4", "--rate-limit-resource=resource2:2"]
    plenty = ["--rate-limit-resource=resource1:6", "--rate-limit-resource=resource2:2"]
    for tag, test_name, flags in (
        ("cross_explicit_limited", "test_cross_model_prioritization_limited_resource", limited),
        ("cross_implicit_limited", "test_cross_model_prioritization_limited_resource", []),
        ("cross_plenty", "test_cross_model_prioritization_plenty_resource", plenty),
    ):
        case = f"RateLimiterTest.{test_name}"
        _unittest(ctx, s, d, test, case, [limit, *flags, repo], tag)

    _bash(d, RATE_LIMITER_TWO_INSTANCES + ON_CPU)
    case = "RateLimiterTest.test_single_model"
    limited_s = _unittest(ctx, s, d, test, case, [limit, repo], "single_limited")
    plenty_s = _unittest(ctx, s, d, test, case, [limit, *plenty, repo], "single_plenty")
    check(
        ctx,
        s,
        "test_single_model takes no longer with plenty resources than with limited ones",
        int(plenty_s) <= int(limited_s),
        f"plenty {plenty_s:.1f} s, limited {limited_s:.1f} s",
    )
    r3 = ["--rate-limit-resource=resource1:3", "--rate-limit-resource=resource2:2"]
    _must_not_start(ctx, s, [limit, *r3, repo], d / "inference_server_r3i.log", short.format(3))

    _bash(d, RATE_LIMITER_DYNAMIC)
    case = "RateLimiterTest.test_single_model_dynamic_batching"
    env = {"TRITONSERVER_DELAY_SCHEDULER": "8"}
    _unittest(ctx, s, d, test, case, [limit, repo], "dynamic_batching", **env)
    _bash(d, RATE_LIMITER_SEQUENCE)
    case = "RateLimiterTest.test_single_model_sequence_batching"
    _unittest(ctx, s, d, test, case, [limit, repo], "sequence_batching")


RESPONSE_CACHE_MODELS = r"""
MODEL_DIR="${PWD}/models"
ENSEMBLE_MODEL_DIR="${MODEL_DIR}/ensemble_models"
ENSEMBLE_CACHE_DECOUPLED="${MODEL_DIR}/ensemble_cache_decoupled"
ENSEMBLE_CACHE_COMPOSING_DECOUPLED="${MODEL_DIR}/ensemble_cache_composing_decoupled"
rm -fr ${ENSEMBLE_MODEL_DIR} && mkdir ${ENSEMBLE_MODEL_DIR}
rm -fr ${ENSEMBLE_CACHE_DECOUPLED} && mkdir ${ENSEMBLE_CACHE_DECOUPLED}
rm -fr ${ENSEMBLE_CACHE_COMPOSING_DECOUPLED} && mkdir ${ENSEMBLE_CACHE_COMPOSING_DECOUPLED}
ENSEMBLE_MODEL="simple_graphdef_float32_float32_float32"
COMPOSING_MODEL="graphdef_float32_float32_float32"

cp -r "${ENSEMBLE}/${ENSEMBLE_MODEL}" "${ENSEMBLE_MODEL_DIR}/${ENSEMBLE_MODEL}"
cp -r "${COMPOSING}" "${ENSEMBLE_MODEL_DIR}/${COMPOSING_MODEL}"
cp -r "${ENSEMBLE}/${ENSEMBLE_MODEL}" "${ENSEMBLE_CACHE_DECOUPLED}/${ENSEMBLE_MODEL}"
cp -r "${COMPOSING}" "${ENSEMBLE_CACHE_DECOUPLED}/${COMPOSING_MODEL}"
cp -r "${ENSEMBLE}/${ENSEMBLE_MODEL}" "${ENSEMBLE_CACHE_COMPOSING_DECOUPLED}/${ENSEMBLE_MODEL}"
cp -r "${COMPOSING}" "${ENSEMBLE_CACHE_COMPOSING_DECOUPLED}/${COMPOSING_MODEL}"
mkdir -p "${MODEL_DIR}/decoupled_cache/1"
mkdir -p "${MODEL_DIR}/identity_cache/1"

echo -e "response_cache { enable: True }" >> "${ENSEMBLE_CACHE_DECOUPLED}/${ENSEMBLE_MODEL}/config.pbtxt"
echo -e "model_transaction_policy { decoupled: True }" >> "${ENSEMBLE_CACHE_DECOUPLED}/${ENSEMBLE_MODEL}/config.pbtxt"
echo -e "response_cache { enable: True }" >> "${ENSEMBLE_CACHE_COMPOSING_DECOUPLED}/${ENSEMBLE_MODEL}/config.pbtxt"
echo -e "model_transaction_policy { decoupled: True }" >> "${ENSEMBLE_CACHE_COMPOSING_DECOUPLED}/${COMPOSING_MODEL}/config.pbtxt"
"""
REDIS_HOST, REDIS_PORT, REDIS_PW = "127.0.0.1", "6379", "redis123!"


def _redis_cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = ["redis-cli", "-h", REDIS_HOST, "-p", REDIS_PORT, *args]
    return subprocess.run(command, capture_output=True, text=True)


def _start_redis(ctx: Context, suite: str, log: Path) -> None:
    """test.sh's ``start_redis``: a daemonized redis-server, checked by ``ping`` (a case)."""
    flags = ["--port", REDIS_PORT, "--bind", REDIS_HOST, "--logfile", str(log)]
    subprocess.run(
        ["redis-server", "--daemonize", "yes", *flags, "--loglevel", "debug"],
        check=True,
        capture_output=True,
    )
    for _ in range(50):
        if (pong := _redis_cli("ping").stdout.strip()) == "PONG":
            break
        time.sleep(0.1)
    check(ctx, suite, f"redis-server starts ({log.name})", pong == "PONG", pong)


def _composing_model(ctx: Context) -> Path:
    """``graphdef_float32_float32_float32`` as the ONNX model of that signature (see the
    module docstring)."""
    onnx = core_suites.generated(ctx, "gen_qa_models.py", "--onnx")
    dest = ctx.work / "data" / "graphdef_float32_float32_float32"
    if not dest.is_dir():
        shutil.copytree(onnx / "onnx_float32_float32_float32", dest)
        config = dest / "config.pbtxt"
        config.write_text(config.read_text().replace("onnx_float32", "graphdef_float32", 1))
    return dest


def _decoupled_with_cache(ctx: Context, suite: str, d: Path, repo: str, model: str) -> None:
    """test.sh's ``check_server_failure_decoupled_model``: the start fails and one log
    line names both the response cache's lack of support and decoupled (two cases)."""
    args = [
        f"--model-repository={d / 'models' / repo}",
        "--cache-config",
        "local,size=10480",
        "--model-control-mode=explicit",
        f"--load-model={model}",
    ]
    log = d / f"inference_server.decoupled.{repo or 'models'}.log"
    server = Server(ctx, args, log, verbose=False)
    started = server.started
    server.stop()
    check(ctx, suite, f"{log.name}: server does not start", not started)
    lines = server.log_text().lower().splitlines()
    found = any(
        "response cache does not currently support" in x and "decoupled" in x for x in lines
    )
    check(ctx, suite, f"{log.name}: log says the cache does not support decoupled", found)


def suite_l0_response_cache(ctx: Context) -> None:
    """``L0_response_cache/test.sh`` without its C++ unit test: the decoupled model that
    must not load with a cache, the cache flags (``--response-cache-byte-size``,
    ``--cache-config``, both, two cache types), the redis cache's connection, argument
    and authentication checks (flags and ``TRITONCACHE_REDIS_*``) against a local
    redis-server, the decoupled ensembles, and ensemble_cache_test.py's four tests."""
    s, d = "L0_response_cache", ctx.qa / "L0_response_cache"
    ensemble = core_suites.generated(ctx, "gen_qa_models.py", "--ensemble")
    _bash(d, RESPONSE_CACHE_MODELS, ENSEMBLE=str(ensemble), COMPOSING=str(_composing_model(ctx)))
    _decoupled_with_cache(ctx, s, d, "", "decoupled_cache")

    base = [
        f"--model-repository={d / 'models'}",
        "--model-control-mode=explicit",
        "--load-model=identity_cache",
    ]
    _must_start(ctx, s, [*base, "--response-cache-byte-size=8192"], d / "server.byte_size.log")
    _must_start(ctx, s, [*base, "--cache-config=local,size=8192"], d / "server.cache_config.log")
    _must_not_start(
        ctx,
        s,
        [*base, "--cache-config=local,size=8192", "--cache-config=redis,key=value"],
        d / "server.two_caches.log",
        "multiple cache configurations",
    )
    _must_not_start(
        ctx,
        s,
        [*base, "--response-cache-byte-size=12345", "--cache-config=local,size=67890"],
        d / "server.both_flags.log",
        "incompatible flags",
    )

    endpoint = [
        "--cache-config",
        f"redis,host={REDIS_HOST}",
        "--cache-config",
        f"redis,port={REDIS_PORT}",
    ]
    _start_redis(ctx, s, d / "redis-server.cli_tests.log")
    try:
        _must_start(ctx, s, [*base, *endpoint], d / "server.redis.log")
        _must_not_start(
            ctx,
            s,
            [*base, "--cache-config=redis,host=localhost", "--cache-config=redis,port=nonexistent"],
            d / "server.redis_bad_port.log",
            "Failed to connect to Redis: Connection refused",
        )
        _must_not_start(
            ctx,
            s,
            [
                *base,
                "--cache-config=redis,host=nonexistent",
                "--cache-config=redis,port=nonexistent",
            ],
            d / "server.redis_bad_host.log",
            "Temporary failure in name resolution",
            "Name or service not known",
        )
        _must_not_start(
            ctx,
            s,
            [*base, f"--cache-config=redis,port={REDIS_HOST}"],
            d / "server.redis_no_host.log",
            "Must at a minimum specify",
        )
        _redis_cli("config", "set", "requirepass", REDIS_PW)
        password = ["--cache-config", f"redis,password={REDIS_PW}"]
        _must_start(ctx, s, [*base, *endpoint, *password], d / "server.redis_password.log")
        wrong = ["--cache-config", "redis,password=wrong"]
        log = d / "server.redis_wrong_password.log"
        _must_not_start(ctx, s, [*base, *endpoint, *wrong], log, "WRONGPASS")
        log = d / "server.redis_no_password.log"
        _must_not_start(ctx, s, [*base, *endpoint], log, "NOAUTH Authentication required")
        env = {"TRITONCACHE_REDIS_PASSWORD": REDIS_PW}
        _must_start(ctx, s, [*base, *endpoint], d / "server.redis_env_password.log", **env)
        env["TRITONCACHE_REDIS_USERNAME"] = "default"
        _must_start(ctx, s, [*base, *endpoint], d / "server.redis_env_user.log", **env)
        env["TRITONCACHE_REDIS_PASSWORD"] = "wrong"
        log = d / "server.redis_env_wrong.log"
        _must_not_start(ctx, s, [*base, *endpoint], log, "WRONGPASS", **env)
    finally:
        _redis_cli("-a", REDIS_PW, "--no-auth-warning", "shutdown", "nosave")
        _redis_cli("shutdown", "nosave")

    ensemble_model = "simple_graphdef_float32_float32_float32"
    _decoupled_with_cache(ctx, s, d, "ensemble_cache_decoupled", ensemble_model)
    _decoupled_with_cache(ctx, s, d, "ensemble_cache_composing_decoupled", ensemble_model)
    for test_name, size in (
        ("test_ensemble_top_level_response_cache", 10840),
        ("test_ensemble_all_models_cache_enabled", 10840),
        ("test_ensemble_composing_model_cache_enabled", 10840),
        ("test_ensemble_cache_insertion_failure", 200),
    ):
        args = [
            f"--model-repository={d / 'models/ensemble_models'}",
            "--cache-config",
            f"local,size={size}",
            "--model-control-mode=explicit",
        ]
        case = f"EnsembleCacheTest.{test_name}"
        _unittest(ctx, s, d, "ensemble_cache_test.py", case, args, test_name)
        if test_name == "test_ensemble_cache_insertion_failure":
            text = (d / f"inference_server.{test_name}.log").read_text(errors="replace")
            needle = "failed to insert key"
            check(ctx, s, f"{test_name}: log has {needle!r}", needle in text.lower())
