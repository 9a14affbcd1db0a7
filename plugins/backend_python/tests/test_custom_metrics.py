"""``pb_utils.MetricFamily`` / ``Metric`` as Triton's Python backend, in both modes: a
model runs one step per request (its outcomes come back as JSON) and the test scrapes
the server's ``/metrics`` over HTTP, asserting Triton's exact lines and error texts."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from .helpers import infer
from .models import add

IO = """
max_batch_size: 0
input [ { name: "STEP" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "RESULT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

#: Each step returns a list of outcomes: a value, "ok", or "<exception type>: <text>".
MODEL = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

MF = None  # pb_utils.MetricFamily, which Triton's stub offers only once the model loads
BUCKETS = [0.1, 1.0, 2.5, 5.0, 10.0]


def attempt(call):
    try:
        result = call()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok" if result is None or isinstance(result, pb_utils.Metric) else result


class TritonPythonModel:
    def initialize(self, args):
        global MF
        MF = pb_utils.MetricFamily
        self.kept = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            step = pb_utils.get_input_tensor_by_name(request, "STEP").as_numpy()[0].decode()
            result = json.dumps(getattr(self, step)())
            out = pb_utils.Tensor("RESULT", np.array([result], dtype=object))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses

    def kinds(self):
        counter = MF(name="pb_counter", description="a counter", kind=MF.COUNTER)
        c = counter.Metric(labels={"zeta": "1", "alpha": 'q"x'})
        gauge = MF(name="pb_gauge", description="a gauge", kind=MF.GAUGE)
        g = gauge.Metric(labels={"k": "g"})
        plain = gauge.Metric()
        histogram = MF(name="pb_histogram", description="a histogram", kind=MF.HISTOGRAM)
        h = histogram.Metric(labels={"b": "2", "a": "1"}, buckets=BUCKETS)
        empty = histogram.Metric(labels={"e": "1"}, buckets=[])
        self.kept.update(counter=counter, gauge=gauge, histogram=histogram, h=h)
        return [
            c.value(), attempt(lambda: c.increment(2023)), c.value(),
            attempt(lambda: c.increment(-1)), attempt(lambda: c.set(1)),
            attempt(lambda: c.observe(1)),
            attempt(lambda: g.increment(-23.5)), g.value(), attempt(lambda: g.observe(1)),
            attempt(lambda: plain.set(1e20)),
            attempt(h.value), attempt(lambda: h.increment(1)), attempt(lambda: h.set(1)),
            attempt(lambda: empty.observe(3)),
        ]

    def observe(self):
        return [attempt(lambda: self.kept["h"].observe(v)) for v in (0.05, 1.5, 6.0)]

    def errors(self):
        counter = MF(name="pb_errors", description="errors", kind=MF.COUNTER)
        histogram = MF(name="pb_errors_h", description="errors", kind=MF.HISTOGRAM)
        self.kept.update(errors_h=histogram)
        return [
            attempt(lambda: histogram.Metric(labels={})),
            attempt(lambda: histogram.Metric(labels={}, buckets=None)),
            attempt(lambda: histogram.Metric(labels={}, buckets=[2.5, 0.1, 1.0])),
            attempt(lambda: histogram.Metric(labels={}, buckets=[1, 1, 2])),
            attempt(lambda: histogram.Metric(labels={}, buckets=(1.0,))),
            attempt(lambda: histogram.Metric(labels={}, buckets=[])),
            attempt(lambda: counter.Metric(labels={}, buckets=[1.0])),
            attempt(lambda: counter.Metric(labels=[("a", "b")])),
            attempt(lambda: counter.Metric(labels={"a": 1})),
            attempt(lambda: counter.Metric(labels={"a:b": "1"})),
            attempt(lambda: MF(name="pb_errors", description="other", kind=MF.GAUGE)),
            attempt(lambda: MF(name="1pb", description="x", kind=MF.GAUGE)),
            attempt(lambda: MF(name="pb_kind", description="x", kind=0)),
        ]

    def lifetime(self):
        family = MF(name="pb_lifetime", description="lifetime", kind=MF.GAUGE)
        metric = family.Metric(labels={"a": "1"})
        metric.set(5)
        del family
        return [
            attempt(lambda: metric.set(1)), attempt(lambda: metric.increment(1)),
            attempt(metric.value), attempt(lambda: metric.observe(1)),
        ]

    def shared(self):
        first = MF(name="pb_shared", description="first", kind=MF.COUNTER)
        second = MF(name="pb_shared", description="second", kind=MF.COUNTER)
        one = first.Metric(labels={"k": "same"})
        two = second.Metric(labels={"k": "same"})
        other = second.Metric(labels={"k": "other"})
        one.increment(7.5)
        values = [two.value(), other.value()]
        del one, first  # 'second' still holds the family and its metrics
        self.kept.update(second=second)
        return values + [two.value()]

    def reuse(self):
        family = MF(name="pb_reuse", description="first life", kind=MF.COUNTER)
        family.Metric(labels={"k": "1"}).increment(4)
        del family
        again = MF(name="pb_reuse", description="second life", kind=MF.COUNTER)
        metric = again.Metric(labels={"k": "1"})
        self.kept.update(again=again)
        return [
            metric.value(),
            attempt(lambda: MF(name="pb_reuse", description="x", kind=MF.GAUGE)),
        ]
"""

LOOPBACK = ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"]
DELETED = (
    "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. The "
    "'MetricFamily' object should be deleted AFTER its corresponding 'Metric' objects have "
    "been deleted."
)


@pytest.fixture(params=["process", "in-process"])
def step(
    request: pytest.FixtureRequest,
    model_repository: Any,
    despina_server: Any,
    http_client: Any,
) -> Callable[[str], Any]:
    """``step(name)``: run one step of the model (a fresh server per test) and return
    its outcomes; ``step.scrape()`` reads ``/metrics``."""
    add(model_repository, "metrics", MODEL, IO, str(request.param))
    running = despina_server(model_repository.root, LOOPBACK)
    client = http_client(running)

    def run(name: str) -> Any:
        result = infer(client, "metrics", {"STEP": np.array([name.encode()], dtype=object)})
        return json.loads(result.as_numpy("RESULT")[0])

    def scrape() -> str:
        with urllib.request.urlopen(running.metrics_url, timeout=30) as response:
            return str(response.read().decode())

    run.scrape = scrape  # type: ignore[attr-defined]
    return run


def family_lines(text: str, name: str) -> list[str]:
    """The lines of family ``name`` in an exposition: HELP, TYPE and its samples."""
    series = {name, f"{name}_count", f"{name}_sum", f"{name}_bucket"}
    return [
        line
        for line in text.splitlines()
        if line.startswith((f"# HELP {name} ", f"# TYPE {name} "))
        or line.replace("{", " ").split(" ")[0] in series
    ]


def histogram_lines(labels: str, count: int, total: str, cumulative: list[int]) -> list[str]:
    bounds = ["0.1", "1", "2.5", "5", "10", "+Inf"]
    return [
        f"pb_histogram_count{{{labels}}} {count}",
        f"pb_histogram_sum{{{labels}}} {total}",
        *(
            f'pb_histogram_bucket{{{labels},le="{le}"}} {n}'
            for le, n in zip(bounds, cumulative, strict=True)
        ),
    ]


def test_counter_gauge_histogram_values_errors_and_exposition(step: Any) -> None:
    assert step("kinds") == [
        0.0,
        "ok",
        2023.0,
        "TritonModelException: Failed to increment metric value: "
        "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
        "non-negative values.",
        "TritonModelException: Failed to set metric value: "
        "TRITONSERVER_METRIC_KIND_COUNTER does not support Set",
        "TritonModelException: Failed to observe metric value: "
        "TRITONSERVER_METRIC_KIND_COUNTER does not support Observe",
        "ok",
        -23.5,
        "TritonModelException: Failed to observe metric value: "
        "TRITONSERVER_METRIC_KIND_GAUGE does not support Observe",
        "ok",
        "TritonModelException: Failed to get metric value: "
        "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value",
        "TritonModelException: Failed to increment metric value: "
        "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment",
        "TritonModelException: Failed to set metric value: "
        "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Set",
        "ok",
    ]
    text = step.scrape()
    assert family_lines(text, "pb_counter") == [
        "# HELP pb_counter a counter",
        "# TYPE pb_counter counter",
        'pb_counter{alpha="q\\"x",zeta="1"} 2023',
    ]
    assert family_lines(text, "pb_gauge") == [
        "# HELP pb_gauge a gauge",
        "# TYPE pb_gauge gauge",
        'pb_gauge{k="g"} -23.5',
        "pb_gauge 1e+20",
    ]
    assert family_lines(text, "pb_histogram") == [
        "# HELP pb_histogram a histogram",
        "# TYPE pb_histogram histogram",
        *histogram_lines('a="1",b="2"', 0, "0", [0] * 6),
        'pb_histogram_count{e="1"} 1',
        'pb_histogram_sum{e="1"} 3',
        'pb_histogram_bucket{e="1",le="+Inf"} 1',
    ]
    assert step("observe") == ["ok"] * 3
    after = family_lines(step.scrape(), "pb_histogram")
    assert after[2:10] == histogram_lines('a="1",b="2"', 3, "7.55", [1, 1, 2, 2, 3, 3])


def test_wrong_arguments_raise_tritons_errors(step: Any) -> None:
    created = "TritonModelException: Error when creating Metric: "
    assert step("errors") == [
        "TritonModelException: Failed to create metric. Missing required buckets.",
        "TritonModelException: Failed to create metric. Missing required buckets.",
        created + "Bucket Boundaries must be strictly sorted",
        created + "Bucket Boundaries must be strictly sorted",
        "TritonModelException: Failed to create metric. Buckets must be a list.",
        "ok",
        "TritonModelException: Failed to create metric. Unexpected buckets found.",
        "TritonModelException: Failed to create metric. Labels must be a dictionary.",
        created + "attempt to access JSON non-string as string",
        created + "Invalid label name",
        "TritonModelException: Error when creating MetricFamily: "
        "Family name already exists with different type",
        "TritonModelException: Error when creating MetricFamily: Invalid metric name",
        "TypeError: MetricFamily(): 'kind' must be MetricFamily.COUNTER, GAUGE or HISTOGRAM, got 0",
    ]
    text = step.scrape()
    assert family_lines(text, "pb_errors") == []  # a family without metrics is not shown
    assert family_lines(text, "pb_errors_h") == [
        "# HELP pb_errors_h errors",
        "# TYPE pb_errors_h histogram",
        "pb_errors_h_count 0",
        "pb_errors_h_sum 0",
        'pb_errors_h_bucket{le="+Inf"} 0',
    ]


def test_a_deleted_family_deletes_its_metrics(step: Any) -> None:
    assert step("lifetime") == [
        f"TritonModelException: Failed to set metric value: {DELETED}",
        f"TritonModelException: Failed to increment metric value: {DELETED}",
        f"TritonModelException: Failed to get metric value: {DELETED}",
        f"TritonModelException: Failed to observe metric value: {DELETED}",
    ]
    assert family_lines(step.scrape(), "pb_lifetime") == []


def test_families_and_label_sets_are_shared(step: Any) -> None:
    assert step("shared") == [7.5, 0.0, 7.5]
    assert family_lines(step.scrape(), "pb_shared") == [
        "# HELP pb_shared first",
        "# TYPE pb_shared counter",
        'pb_shared{k="same"} 7.5',
        'pb_shared{k="other"} 0',
    ]


def test_a_name_is_reused_after_delete_with_its_first_kind_and_help(step: Any) -> None:
    assert step("reuse") == [
        0.0,
        "TritonModelException: Error when creating MetricFamily: "
        "Family name already exists with different type",
    ]
    assert family_lines(step.scrape(), "pb_reuse") == [
        "# HELP pb_reuse first life",
        "# TYPE pb_reuse counter",
        'pb_reuse{k="1"} 0',
    ]


#: Counts its executions in a family it keeps for its lifetime.
COUNTING = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.family = pb_utils.MetricFamily(
            name="pb_executions", description="executions", kind=pb_utils.MetricFamily.COUNTER)
        self.metric = self.family.Metric(labels={"model": args["model_name"]})

    def execute(self, requests):
        self.metric.increment(1)
        out = pb_utils.Tensor("RESULT", np.array([b"ok"], dtype=object))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""


@pytest.mark.parametrize("mode", ["process", "in-process"])
def test_series_outlive_an_unload_and_a_reload_continues_them(
    mode: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    """As Triton: unloading does not delete a model's metrics; the reloaded model's
    metric of the same labels continues the series."""
    add(model_repository, "counting", COUNTING, IO, mode)
    flags = [*LOOPBACK, "--model-control-mode=explicit", "--load-model=counting"]
    running = despina_server(model_repository.root, flags)
    client = http_client(running)
    line = 'pb_executions{model="counting"} '

    def run_and_scrape() -> list[str]:
        infer(client, "counting", {"STEP": np.array([b"-"], dtype=object)})
        with urllib.request.urlopen(running.metrics_url, timeout=30) as response:
            text = response.read().decode()
        return [row for row in text.splitlines() if row.startswith(line)]

    assert run_and_scrape() == [line + "1"]
    client.unload_model("counting")
    client.load_model("counting")
    assert run_and_scrape() == [line + "2"]
