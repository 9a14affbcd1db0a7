"""deploy/grafana/despina.json: a valid Grafana dashboard whose every PromQL query selects
only series a real Despina server exports (histograms and summaries on), with labels
those series carry."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from despina.testing import RunningServer

from .helpers import infer, samples, scrape

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "despina.json"
#: What a Grafana variable stands for while a query is parsed.
VARIABLES = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded = json.loads(DASHBOARD.read_text())
    assert isinstance(loaded, dict)
    return loaded


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, the ones inside rows included."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target and query variable."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield f"panel {panel['id']} '{panel['title']}' {target['refId']}", target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((\w+), *(\w+)\)", variable["definition"])
            assert match is not None, f"variable {variable['name']}: {variable['definition']}"
            yield f"variable {variable['name']}", f"group by ({match[2]}) ({match[1]})"


def substituted(expr: str) -> str:
    """``expr`` with Grafana's variables replaced (``$model`` matches every model)."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: VARIABLES.get(m[1], ".*"), expr)


def selectors(node: Any) -> Iterator[Any]:
    """Every vector selector in a parsed PromQL expression."""
    import promql_parser

    if isinstance(node, promql_parser.VectorSelector):
        yield node
    elif isinstance(node, promql_parser.MatrixSelector):
        yield node.vector_selector
    elif isinstance(node, promql_parser.Call):
        for arg in node.args:
            yield from selectors(arg)
    elif isinstance(node, promql_parser.BinaryExpr):
        yield from selectors(node.lhs)
        yield from selectors(node.rhs)
    elif isinstance(node, promql_parser.AggregateExpr):
        yield from selectors(node.expr)
        if node.param is not None:
            yield from selectors(node.param)
    elif isinstance(
        node, promql_parser.ParenExpr | promql_parser.UnaryExpr | promql_parser.SubqueryExpr
    ):
        yield from selectors(node.expr)


def test_is_a_valid_dashboard(dashboard: dict[str, Any]) -> None:
    for key in ("title", "uid", "schemaVersion", "panels", "templating", "time"):
        assert key in dashboard, key
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["uid"]
    ids = [panel["id"] for panel in panels(dashboard)]
    assert all(isinstance(i, int) for i in ids) and len(ids) == len(set(ids)), ids
    names = {v["name"] for v in dashboard["templating"]["list"]}
    for panel in panels(dashboard):
        assert panel["type"] and panel["title"], panel
        grid = panel["gridPos"]
        assert {"x", "y", "w", "h"} <= grid.keys()
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] == "row":
            continue
        targets = panel["targets"]
        assert targets, panel["title"]
        assert len({t["refId"] for t in targets}) == len(targets), panel["title"]
        uid = panel["datasource"]["uid"]
        assert uid.strip("${}") in names, f"{panel['title']}: data source {uid}"
    used = " ".join(expr for _, expr in queries(dashboard))
    assert set(re.findall(r"\$\{?(\w+)", used)) <= names | set(VARIABLES)


@pytest.fixture
def exported(serve: Callable[..., RunningServer]) -> dict[str, set[str]]:
    """Series name -> its label names, scraped from a server with histograms and
    summaries on, after one request."""
    running = serve(
        "--metrics-config=histogram_latencies=true", "--metrics-config=summary_latencies=true"
    )
    infer(running, 1.0)
    series: defaultdict[str, set[str]] = defaultdict(set)
    for _, name, sample in samples(scrape(running)):
        series[name].update(sample.labels)
    return series


def test_every_query_selects_exported_series(
    dashboard: dict[str, Any], exported: dict[str, set[str]]
) -> None:
    promql_parser = pytest.importorskip(
        "promql_parser", reason="the PromQL parser (dev dependency promql-parser) is not installed"
    )
    checked = 0
    for where, expr in queries(dashboard):
        try:
            tree = promql_parser.parse(substituted(expr))
        except ValueError as exc:
            pytest.fail(f"{where}: {expr!r} is not PromQL: {exc}")
        found = list(selectors(tree))
        assert found, f"{where}: selects no series"
        for selector in found:
            assert selector.name in exported, f"{where}: Despina exports no '{selector.name}'"
            labels = {m.name for m in selector.matchers.matchers} - {"__name__"}
            missing = labels - exported[selector.name]
            assert not missing, f"{where}: '{selector.name}' has no label {sorted(missing)}"
            checked += 1
    assert checked >= 20
    names = {
        s.name
        for _, expr in queries(dashboard)
        for s in selectors(promql_parser.parse(substituted(expr)))
    }
    for family in (
        "nv_inference_first_response_histogram_ms_bucket",
        "nv_inference_request_summary_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_output_duration_us",
        "nv_model_load_duration_secs",
        "nv_cpu_utilization",
        "nv_cpu_memory_used_bytes",
    ):
        assert family in names, f"the dashboard shows no {family}"
