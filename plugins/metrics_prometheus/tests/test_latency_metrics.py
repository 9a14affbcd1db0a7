"""Triton's latency histograms and summaries (``--metrics-config``), the model load
duration, and the compute input/output split reaching the counters: real servers, real
models, scraped over HTTP and read with prometheus-client's parser."""

from __future__ import annotations

import math
import queue
import time
from collections.abc import Callable

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from despina.testing import ADD_SUB_MODEL_PY, RepositoryBuilder, RunningServer

from .helpers import LOOPBACK, family_help, family_types, infer, scrape, value

TOY = {"model": "toy", "version": "1"}
HISTOGRAM = "nv_inference_first_response_histogram_ms"
#: Triton 2.51's summary texts (scraped from tritonserver --metrics-config
#: summary_latencies=true); the compute ones repeat the counters' texts, as Triton's do.
SUMMARY_HELP = {
    "nv_inference_request_summary_us": "Summary of inference request duration in microseconds (includes cached requests)",
    "nv_inference_queue_summary_us": "Summary of inference queuing duration in microseconds (includes cached requests)",
    "nv_inference_compute_input_summary_us": "Cumulative compute input duration in microseconds (does not include cached requests)",
    "nv_inference_compute_infer_summary_us": "Cumulative compute inference duration in microseconds (does not include cached requests)",
    "nv_inference_compute_output_summary_us": "Cumulative inference compute output duration in microseconds (does not include cached requests)",
}
IN_PROCESS = 'parameters { key: "DESPINA_EXECUTION_MODE" value { string_value: "in-process" } }'
#: Answers after DELAY_MS, then again after 300 ms more (final): the first response's
#: time is DELAY_MS, the request's over 300 ms.
DECOUPLED_PY = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            delay = float(pb_utils.get_input_tensor_by_name(request, "DELAY_MS").as_numpy()[0])
            sender = request.get_response_sender()
            out = pb_utils.Tensor("OUT", np.array([1], np.int32))
            time.sleep(delay / 1000)
            sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            time.sleep(0.3)
            sender.send(
                pb_utils.InferenceResponse(output_tensors=[out]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None
"""
DECOUPLED_CONFIG = f"""
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "DELAY_MS" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
{IN_PROCESS}
model_metrics {{
  metric_control: [
    {{
      metric_identifier: {{ family: "{HISTOGRAM}" }}
      histogram_options: {{ buckets: [ 10, 200, 100000 ] }}
    }}
  ]
}}
"""
ADD_SUB_CONFIG = f"""
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}, {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}, {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
{IN_PROCESS}
"""


def test_off_by_default_with_no_per_request_recorder(serve: Callable[..., RunningServer]) -> None:
    running = serve()
    infer(running, 1.0)
    text = scrape(running)
    assert not [name for name in family_types(text) if "_histogram_" in name or "_summary_" in name]
    assert all(v.stats.latency is None for v in running.server.metrics_host.ready_versions())
    assert value(text, "nv_inference_request_success", **TOY) == 1


def test_first_response_histogram_with_tritons_buckets(
    serve: Callable[..., RunningServer],
) -> None:
    running = serve("--metrics-config=histogram_latencies=true")
    before = scrape(running)
    assert family_types(before)[HISTOGRAM] == "histogram"
    assert (
        family_help(before)[HISTOGRAM] == "Duration from request to first response in milliseconds"
    )
    assert value(before, f"{HISTOGRAM}_count", **TOY) == 0
    for _ in range(3):
        infer(running, 1.0)
    infer(running, -1.0)  # an error response is a first response too (Triton)
    text = scrape(running)
    assert value(text, f"{HISTOGRAM}_count", **TOY) == 4
    for bound in ("100", "500", "2000", "5000", "+Inf"):  # Triton's defaults, written as it does
        assert value(text, f"{HISTOGRAM}_bucket", le=bound, **TOY) == 4
    assert (
        'le="100"}' in text
        and 'nv_inference_first_response_histogram_ms_bucket{model="toy"' in text
    )
    assert value(text, f"{HISTOGRAM}_sum", **TOY) < 100  # whole milliseconds, floored
    assert "nv_inference_request_summary_us" not in text


def test_first_response_of_a_decoupled_model_in_its_own_buckets(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> None:
    model_repository.add("stream", DECOUPLED_CONFIG, {"1/model.py": DECOUPLED_PY})
    running = despina_server(
        model_repository.root, [*LOOPBACK, "--metrics-config=histogram_latencies=true"]
    )
    answers: queue.Queue[object] = queue.Queue()
    with grpcclient.InferenceServerClient(running.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        delay = grpcclient.InferInput("DELAY_MS", [1], "FP32")
        delay.set_data_from_numpy(np.array([20], np.float32))
        client.async_stream_infer("stream", [delay])
        for _ in range(2):
            answer = answers.get(timeout=30)
            assert not isinstance(answer, Exception), answer
        client.stop_stream()
    model = {"model": "stream", "version": "1"}
    text = scrape(running)
    assert value(text, f"{HISTOGRAM}_count", **model) == 1
    assert 20 <= value(text, f"{HISTOGRAM}_sum", **model) < 200  # not the 320+ ms request
    assert value(text, f"{HISTOGRAM}_bucket", le="10", **model) == 0
    assert value(text, f"{HISTOGRAM}_bucket", le="200", **model) == 1
    assert value(text, f"{HISTOGRAM}_bucket", le="100000", **model) == 1
    assert value(text, "nv_inference_request_duration_us", **model) >= 320_000


def test_summaries_with_chosen_quantiles(serve: Callable[..., RunningServer]) -> None:
    running = serve(
        "--metrics-config=summary_latencies=true",
        "--metrics-config=summary_quantiles=0.5:0.05,0.99:0.001",
    )
    before = scrape(running)
    assert {n: family_help(before)[n] for n in SUMMARY_HELP} == SUMMARY_HELP
    assert all(family_types(before)[name] == "summary" for name in SUMMARY_HELP)
    assert math.isnan(value(before, "nv_inference_queue_summary_us", quantile="0.5", **TOY))
    for _ in range(5):
        infer(running, 1.0)
    text = scrape(running)
    assert 'quantile="0.9"' not in text and 'quantile="0.99"}' in text  # le/quantile last
    for name in SUMMARY_HELP:
        assert value(text, f"{name}_count", **TOY) == 5, name
        for quantile in ("0.5", "0.99"):
            assert value(text, name, quantile=quantile, **TOY) >= 0, name
    request_sum = value(text, "nv_inference_request_summary_us_sum", **TOY)
    counter = value(text, "nv_inference_request_duration_us", **TOY)
    assert 0 < request_sum <= counter < request_sum + 5  # per-request floors vs the total's
    median = value(text, "nv_inference_request_summary_us", quantile="0.5", **TOY)
    top = value(text, "nv_inference_request_summary_us", quantile="0.99", **TOY)
    assert 0 < median <= top <= request_sum
    assert HISTOGRAM not in text


def test_summary_window_forgets_old_requests(serve: Callable[..., RunningServer]) -> None:
    running = serve(
        "--metrics-config=summary_latencies=true",
        "--metrics-config=summary_max_age=0.4",
        "--metrics-config=summary_age_buckets=2",
    )
    infer(running, 1.0)
    assert value(scrape(running), "nv_inference_queue_summary_us", quantile="0.5", **TOY) >= 0
    time.sleep(0.5)
    text = scrape(running)
    assert math.isnan(value(text, "nv_inference_queue_summary_us", quantile="0.5", **TOY))
    assert value(text, "nv_inference_queue_summary_us_count", **TOY) == 1  # counts stay


@pytest.mark.parametrize(
    ("setting", "error"),
    [
        ("summary_quantiles=0.5", "is not <quantile>:<error>"),
        ("summary_quantiles=1.5:0.01", "is not <quantile>:<error>"),
        ("summary_max_age=0", "expected a positive number"),
        ("summary_age_buckets=x", "expected a positive number"),
        ("histogram_latencies=maybe", "histogram_latencies"),
    ],
)
def test_bad_latency_settings_fail_startup(
    serve: Callable[..., RunningServer], setting: str, error: str
) -> None:
    from despina.serving.server import StartupError

    with pytest.raises(StartupError, match=error):
        serve(f"--metrics-config={setting}")


def test_buckets_not_increasing_fail_that_model(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> None:
    bad = DECOUPLED_CONFIG.replace("[ 10, 200, 100000 ]", "[ 10, 5 ]")
    model_repository.add("stream", bad, {"1/model.py": DECOUPLED_PY})
    model_repository.add("add_sub", ADD_SUB_CONFIG, {"1/model.py": ADD_SUB_MODEL_PY})
    running = despina_server(
        model_repository.root,
        [*LOOPBACK, "--metrics-config=histogram_latencies=true", "--exit-on-error=false"],
    )
    rows = {row["name"]: row for row in running.server.dataplane.repository_index()}
    assert rows["stream"]["state"] == "UNAVAILABLE"
    assert "must be strictly increasing, got [10.0, 5.0]" in rows["stream"]["reason"]
    assert rows["add_sub"]["state"] == "READY"


def test_load_duration_per_model_version(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> None:
    config = ADD_SUB_CONFIG + "version_policy { all {} }\n"
    model_repository.add(
        "add_sub", config, {"1/model.py": ADD_SUB_MODEL_PY, "2/model.py": ADD_SUB_MODEL_PY}
    )
    text = scrape(despina_server(model_repository.root, LOOPBACK))
    assert family_types(text)["nv_model_load_duration_secs"] == "gauge"
    assert family_help(text)["nv_model_load_duration_secs"] == "Model load time in seconds"
    for version in ("1", "2"):
        seconds = value(text, "nv_model_load_duration_secs", model="add_sub", version=version)
        assert 0 < seconds < 60


def test_compute_input_and_output_reach_the_counters(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> None:
    model_repository.add("add_sub", ADD_SUB_CONFIG, {"1/model.py": ADD_SUB_MODEL_PY})
    running = despina_server(model_repository.root, LOOPBACK)
    with grpcclient.InferenceServerClient(running.grpc_url) as client:
        for _ in range(20):
            items = []
            for name in ("INPUT0", "INPUT1"):
                item = grpcclient.InferInput(name, [4], "FP32")
                item.set_data_from_numpy(np.ones(4, np.float32))
                items.append(item)
            client.infer("add_sub", items)
    text = scrape(running)
    model = {"model": "add_sub", "version": "1"}
    for phase in ("input", "infer", "output"):
        assert value(text, f"nv_inference_compute_{phase}_duration_us", **model) > 0, phase
