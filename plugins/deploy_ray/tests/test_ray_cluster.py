"""Despina on a real local Ray cluster (a head and one worker node on 127.0.0.1): Ray
Serve's HTTP and gRPC proxies route v2 requests to Despina replicas; requests spread over
replicas, a killed replica is replaced, autoscaling adds replicas under load.

Replicas serve the tests' toy backend (``core/tests/toy_backend.py``, on the replicas'
PYTHONPATH); every wait is bounded."""

from __future__ import annotations

import collections
import gzip
import json
import os
import queue
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import toy_backend
from despina.testing import RepositoryBuilder, free_port
from toy_backend import toy_config

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
despina_deploy_ray = pytest.importorskip("despina_deploy_ray")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

APP = "despina"
EXAMPLES = Path(__file__).parents[3] / "examples" / "model_repository"
BODY = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
            {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
        ]
    }
).encode()


class Cluster:
    """The running cluster, Serve's proxy addresses and the repository replicas serve."""

    def __init__(self, http_port: int, grpc_port: int, repository: Path) -> None:
        self.http = f"http://127.0.0.1:{http_port}"
        self.grpc = f"127.0.0.1:{grpc_port}"
        self.repository = repository
        self.deployed: tuple[tuple[str, ...], dict[str, Any]] | None = None

    def deploy(self, *extra_args: str, **options: Any) -> None:
        """Run the Despina app (deleting any first) and wait until it is RUNNING;
        ``extra_args`` go on the replicas' command line."""
        self.deployed = None
        serve.delete(APP)
        wait_until("the old replicas are gone", lambda: not replica_actors(), 60)
        actor = {
            "num_cpus": 0.5,
            "runtime_env": {"env_vars": {"PYTHONPATH": str(Path(toy_backend.__file__).parent)}},
        }
        args = [f"--model-repository={self.repository}", "--plugin=toy_backend", *extra_args]
        app = despina_deploy_ray.despina_app(
            args, ray_actor_options=actor, health_check_period_s=1, **options
        )
        serve.run(app, name=APP, route_prefix="/", blocking=False)
        wait_until("the app runs", lambda: app_status() == "RUNNING", 60)
        self.deployed = (extra_args, options)

    def ensure(self, *extra_args: str, **options: Any) -> None:
        """:meth:`deploy` unless the app runs with these arguments already."""
        if self.deployed != (extra_args, options):
            self.deploy(*extra_args, **options)

    def post(
        self, path: str, body: bytes = BODY, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        return http(f"{self.http}{path}", body, headers)


def http(
    url: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    method = "GET" if body is None else "POST"
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def wait_until(what: str, condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.2)


def app_status() -> str:
    application = serve.status().applications.get(APP)
    return "" if application is None else str(application.status.value)


def running_replicas() -> int:
    deployments = serve.status().applications[APP].deployments
    return sum(d.replica_states.get("RUNNING", 0) for d in deployments.values())


def replica_actors() -> list[str]:
    """The names of the app's replica actors (``SERVE_REPLICA::app#deployment#id``)."""
    actors = ray.util.list_named_actors(all_namespaces=True)
    return sorted(a["name"] for a in actors if a["name"].startswith(f"SERVE_REPLICA::{APP}#"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    from ray.cluster_utils import Cluster as RayCluster
    from ray.serve.config import gRPCOptions

    root = tmp_path_factory.mktemp("repository")
    builder = RepositoryBuilder(root)
    builder.add("toy", toy_config(), {"1/model.toy": "{}"})
    builder.add("slow", toy_config(), {"1/model.toy": '{"delay_s": 0.2}'})
    shutil.copytree(EXAMPLES / "py_repeat", root / "py_repeat")  # decoupled, Python backend
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray_cluster = RayCluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    ray_cluster.add_node(num_cpus=1)
    try:
        ray.init(address=ray_cluster.address, logging_level="ERROR", log_to_driver=False)
        ray_cluster.wait_for_nodes()
        http_port, grpc_port = free_port(), free_port()
        serve.start(
            http_options={"host": "127.0.0.1", "port": http_port},
            grpc_options=gRPCOptions(
                port=grpc_port, grpc_servicer_functions=[despina_deploy_ray.SERVICER]
            ),
        )
        yield Cluster(http_port, grpc_port, root)
    finally:
        serve.shutdown()
        ray.shutdown()
        ray_cluster.shutdown()


def test_v2_rest_and_grpc_through_serve_spread_over_replicas(cluster: Cluster) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    cluster.deploy(num_replicas=2)
    assert http(f"{cluster.http}/v2/health/ready")[0] == 200
    assert http(f"{cluster.http}/v2/health/live")[0] == 200
    assert json.loads(http(f"{cluster.http}/v2/models/toy")[2])["name"] == "toy"
    status, _, body = cluster.post("/v2/models/missing/infer")
    assert status == 404 and "missing" in json.loads(body)["error"]
    status, _, body = cluster.post("/v2/models/toy/infer", b"{not json")
    assert status == 400 and "failed to parse" in json.loads(body)["error"]

    seen: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def client() -> None:
        for _ in range(10):
            status, headers, body = cluster.post("/v2/models/toy/infer")
            assert status == 200, body
            assert json.loads(body)["outputs"][0]["data"] == [2, 3, 4, 5]
            with lock:
                seen[headers["x-despina-replica"]] += 1

    threads = [threading.Thread(target=client) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(seen.values()) == 40
    assert len(seen) == 2, seen  # both replicas answered

    # tritonclient over Ray Serve's proxies: binary tensors (HTTP) and gRPC
    a = np.arange(4, dtype=np.float32)
    for module, url in ((httpclient, cluster.http[7:]), (grpcclient, cluster.grpc)):
        client_ = module.InferenceServerClient(url)
        inputs = [module.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        result = client_.infer("toy", inputs)
        assert result.as_numpy("OUTPUT0").tolist() == (a + a).tolist()
        assert client_.is_server_ready() and client_.is_model_ready("toy")
        assert client_.get_model_metadata("toy") is not None
        with pytest.raises(InferenceServerException) as raised:
            client_.infer("missing", inputs)
        assert "missing" in str(raised.value)
        client_.close()


def test_killed_replica_is_answered_and_replaced(cluster: Cluster) -> None:
    cluster.deploy(num_replicas=2)
    before = replica_actors()
    assert len(before) == 2
    outcomes: collections.Counter[int] = collections.Counter()
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            status, _, _ = cluster.post("/v2/models/slow/infer")
            outcomes[status] += 1

    threads = [threading.Thread(target=client) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1)
        ray.kill(ray.get_actor(before[0], namespace="serve"), no_restart=True)
        wait_until(
            "the killed replica is replaced",
            lambda: before[0] not in replica_actors() and running_replicas() == 2,
            60,
        )
        time.sleep(1)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    # every request was answered: a result, or an error for those on the killed replica
    assert set(outcomes) <= {200, 500, 503}, outcomes
    assert outcomes[200] > 0
    assert before[1] in replica_actors()
    assert cluster.post("/v2/models/slow/infer")[0] == 200


def test_autoscaling_adds_replicas_under_load(cluster: Cluster) -> None:
    cluster.deploy(
        autoscaling_config={
            "min_replicas": 1,
            "max_replicas": 2,
            "target_ongoing_requests": 1,
            "upscale_delay_s": 0.5,
            "downscale_delay_s": 60,
        }
    )
    assert running_replicas() == 1
    stop = threading.Event()
    failures: list[int] = []

    def client() -> None:
        while not stop.is_set():
            status = cluster.post("/v2/models/slow/infer")[0]
            if status != 200:
                failures.append(status)

    threads = [threading.Thread(target=client) for _ in range(6)]
    for thread in threads:
        thread.start()
    try:
        wait_until("a second replica runs", lambda: running_replicas() == 2, 60)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert failures == []


# What `despina serve` answers beyond inference, through Ray Serve's proxies. One replica,
# so that the statistics (each replica's own) count every request of the test.
LIMIT = 65536


def test_compressed_bodies_as_the_http_frontend(cluster: Cluster) -> None:
    import tritonclient.http as httpclient

    cluster.ensure(f"--http-max-input-size={LIMIT}", num_replicas=1)
    client = httpclient.InferenceServerClient(cluster.http[7:])
    a = np.arange(4, dtype=np.float32)
    inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a, binary_data=False)
    for algorithm in ("gzip", "deflate"):
        result = client.infer(
            "toy",
            inputs,
            request_compression_algorithm=algorithm,
            response_compression_algorithm=algorithm,
        )
        assert result.as_numpy("OUTPUT0").tolist() == (a + a).tolist()
    client.close()

    status, headers, body = cluster.post(
        "/v2/models/toy/infer",
        gzip.compress(BODY),
        {"Content-Encoding": "gzip", "Accept-Encoding": "gzip"},
    )
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert json.loads(gzip.decompress(body))["outputs"][0]["data"] == [2, 3, 4, 5]
    # inflated past --http-max-input-size: the frontend's 413, whatever the compressed size
    bomb = gzip.compress(b" " * (LIMIT + 1))
    assert len(bomb) < LIMIT
    status, _, body = cluster.post("/v2/models/toy/infer", bomb, {"Content-Encoding": "gzip"})
    assert status == 413
    assert json.loads(body)["error"] == (
        f"request body exceeds the maximum allowed size of {LIMIT} bytes; "
        "use --http-max-input-size to increase the limit"
    )
    status, _, body = cluster.post(
        "/v2/models/toy/infer", b"not gzip", {"Content-Encoding": "gzip"}
    )
    assert status == 400 and "Can not decode content-encoding: gzip" in json.loads(body)["error"]


def sse_events(body: bytes) -> list[dict[str, Any]]:
    """The JSON objects of a ``text/event-stream`` body."""
    events = [e for e in body.decode().split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events), body
    return [json.loads(e.removeprefix("data: ")) for e in events]


def test_generate_and_generate_stream(cluster: Cluster) -> None:
    cluster.ensure(f"--http-max-input-size={LIMIT}", num_replicas=1)
    toy = json.dumps({"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1]}).encode()
    status, _, body = cluster.post("/v2/models/toy/generate", toy)
    assert status == 200, body
    assert json.loads(body) == {
        "OUTPUT0": [2, 3, 4, 5],
        "OUTPUT1": [0, 1, 2, 3],
        "model_name": "toy",
        "model_version": "1",
    }
    # a decoupled model streams one event per response
    status, headers, body = cluster.post(
        "/v2/models/py_repeat/generate_stream", b'{"IN": [5, 6, 7]}'
    )
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert [(e["IDX"], e["OUT"]) for e in sse_events(body)] == [(0, 5), (1, 6), (2, 7)]
    status, _, body = cluster.post("/v2/models/py_repeat/versions/1/generate_stream", b'{"IN": []}')
    assert status == 200 and body == b""
    # /generate needs exactly one response; a client's mistakes are 400 with Triton's text
    status, _, body = cluster.post("/v2/models/py_repeat/generate", b'{"IN": [5, 6]}')
    assert status == 400
    assert json.loads(body)["error"].startswith("generate expects model to produce exactly 1")
    status, _, body = cluster.post("/v2/models/toy/generate_stream", b'{"INPUT0": [1, 2, 3]}')
    assert status == 400
    assert json.loads(body)["error"] == (
        "The schema can not convert input 'INPUT0' to tensor with proper shape"
    )


def test_statistics_config_and_index_over_both_protocols(cluster: Cluster) -> None:
    import tritonclient.grpc as grpcclient

    cluster.ensure(f"--http-max-input-size={LIMIT}", num_replicas=1)
    client = grpcclient.InferenceServerClient(cluster.grpc)

    def rest_count() -> int:
        status, _, body = http(f"{cluster.http}/v2/models/toy/versions/1/stats")
        assert status == 200, body
        (stats,) = json.loads(body)["model_stats"]
        return int(stats["inference_stats"]["success"]["count"])

    def grpc_count() -> int:
        (stats,) = client.get_inference_statistics("toy", as_json=True)["model_stats"]
        return int(stats["inference_stats"]["success"].get("count", 0))

    before = rest_count()
    assert grpc_count() == before
    for _ in range(3):
        assert cluster.post("/v2/models/toy/infer")[0] == 200
    assert rest_count() == grpc_count() == before + 3
    everything = json.loads(http(f"{cluster.http}/v2/models/stats")[2])["model_stats"]
    assert {s["name"] for s in everything} == {"toy", "slow", "py_repeat"}

    config = client.get_model_config("py_repeat", as_json=True)["config"]
    assert config["model_transaction_policy"] == {"decoupled": True}
    index = client.get_model_repository_index(as_json=True)["models"]
    assert {m["name"] for m in index} == {"toy", "slow", "py_repeat"}
    status, _, body = http(f"{cluster.http}/v2/repository/index", b"{}")
    assert status == 200 and {m["name"] for m in json.loads(body)} == {"toy", "slow", "py_repeat"}
    client.close()


def test_model_stream_infer_through_serve(cluster: Cluster) -> None:
    import tritonclient.grpc as grpcclient

    cluster.ensure(f"--http-max-input-size={LIMIT}", num_replicas=1)
    client = grpcclient.InferenceServerClient(cluster.grpc)
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    repeat = grpcclient.InferInput("IN", [3], "INT32")
    repeat.set_data_from_numpy(np.array([5, 6, 7], dtype=np.int32))
    client.async_stream_infer("py_repeat", [repeat], request_id="r")
    toy = [grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in toy:
        tensor.set_data_from_numpy(np.ones(4, dtype=np.float32))
    client.async_stream_infer("toy", toy, request_id="t")
    client.async_stream_infer("missing", toy, request_id="m")
    got = [results.get(timeout=60) for _ in range(5)]
    client.stop_stream()
    client.close()

    errors = [str(error) for result, error in got if error is not None]
    assert len(errors) == 1 and "missing" in errors[0]
    answers = [result for result, error in got if error is None]
    outs = [int(r.as_numpy("OUT")[0]) for r in answers if r.get_response().id == "r"]
    assert outs == [5, 6, 7]
    (toy_result,) = [r for r in answers if r.get_response().id == "t"]
    assert toy_result.as_numpy("OUTPUT0").tolist() == [2, 2, 2, 2]


def test_changes_to_one_replica_are_refused(cluster: Cluster) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    cluster.ensure(f"--http-max-input-size={LIMIT}", num_replicas=1)
    for path, body in (
        ("/v2/repository/models/toy/load", b"{}"),
        ("/v2/repository/models/toy/unload", b"{}"),
        ("/v2/systemsharedmemory/region/r/register", b'{"key": "/r", "byte_size": 16}'),
        ("/v2/logging", b'{"log_verbose_level": 1}'),
    ):
        status, _, reply = cluster.post(path, body)
        assert status == 409, (path, reply)
        assert "would change only the replica that answers" in json.loads(reply)["error"]
    assert json.loads(http(f"{cluster.http}/v2/logging")[2])["log_verbose_level"] == 0

    client = grpcclient.InferenceServerClient(cluster.grpc)
    for call in (
        lambda: client.load_model("toy"),
        lambda: client.unload_model("toy"),
        lambda: client.register_system_shared_memory("r", "/r", 16),
        lambda: client.update_log_settings({"log_verbose_level": 1}),
    ):
        with pytest.raises(InferenceServerException) as raised:
            call()
        assert raised.value.status() == "StatusCode.FAILED_PRECONDITION"
        assert "would change only the replica that answers" in str(raised.value)
    assert client.is_model_ready("toy")
    settings = client.get_log_settings(as_json=True)["settings"]
    assert settings["log_verbose_level"].get("uint32_param", 0) == 0
    client.close()
