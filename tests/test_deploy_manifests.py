"""deploy/: the Kustomize overlays (cpu, gpu) render with ``kubectl kustomize`` and every
object validates offline: core kinds against Kubernetes' OpenAPI schemas
(``kubernetes-validate``, strict), the Prometheus-operator and KServe kinds against the
fields of their published CRDs (tests/data/deploy_schemas, sources named in each file).
The server arguments each manifest gives are parsed by Despina's own command line."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from despina.flags import parse_settings
from despina.plugins import create_plugins

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
SCHEMAS = Path(__file__).with_name("data") / "deploy_schemas"
#: Kubernetes version whose schemas the core kinds are checked against.
KUBERNETES = "1.32.0"
OVERLAYS = ("cpu", "gpu")

kubernetes_validate = pytest.importorskip("kubernetes_validate")
jsonschema = pytest.importorskip("jsonschema")


def render(overlay: str) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize deploy/k8s/overlays/<overlay>`` renders."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed")
    path = DEPLOY / "k8s" / "overlays" / overlay
    output = subprocess.run(
        [kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(output) if doc]


def load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def validate(doc: dict[str, Any]) -> None:
    """Check one object: a CRD kind against its schema file, else Kubernetes' own."""
    schema_file = SCHEMAS / f"{doc['kind']}.json"
    if schema_file.exists():
        jsonschema.validate(doc, json.loads(schema_file.read_text()))
        for container in doc["spec"].get("containers", []):  # core/v1 Containers
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}
            kubernetes_validate.validate(
                {**pod, "spec": {"containers": [container]}}, KUBERNETES, strict=True
            )
        return
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [doc for doc in docs if doc["kind"] == kind]
    return found


def accepted(args: list[str]) -> Any:
    """Despina's parse of a manifest's server arguments (argparse exits on a bad one)."""
    return parse_settings(args, create_plugins())


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_and_validates(overlay: str) -> None:
    docs = render(overlay)
    kinds = sorted(doc["kind"] for doc in docs)
    assert kinds == [
        "Deployment",
        "HorizontalPodAutoscaler",
        "PrometheusRule",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
    ]
    for doc in docs:
        validate(doc)
    pod = by_kind(docs, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert (
        container["image"]
        == f"registry.example.com/despina:{'cuda' if overlay == 'gpu' else 'cpu'}"
    )
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert pod["securityContext"]["runAsUser"] == 1000
    settings = accepted(container["args"])
    # the pod outlives the grace period and the drain
    assert pod["terminationGracePeriodSeconds"] > (
        settings.shutdown_grace_period + settings.exit_timeout_secs
    )
    limits = container["resources"]["limits"]
    assert ("nvidia.com/gpu" in limits) == (overlay == "gpu")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    monitor = by_kind(docs, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def test_autoscaling_signal_is_queue_time_weighted_by_requests_over_all_models() -> None:
    """HPA metric <- prometheus-adapter rule <- recording rule: sum over models of queue
    time / sum over models of successful requests (not an average of per-model ratios)."""
    docs = render("cpu")
    (group,) = by_kind(docs, "PrometheusRule")["spec"]["groups"]
    (rule,) = group["rules"]
    numerator, denominator = rule["expr"].split("\n/\n")
    assert re.fullmatch(
        r"sum by \(namespace, pod\) \(rate\(nv_inference_queue_duration_us\[1m\]\)\)",
        numerator.strip(),
    )
    assert "sum by (namespace, pod) (rate(nv_inference_request_success[1m]))" in denominator
    adapter = yaml.safe_load(
        (DEPLOY / "k8s" / "monitoring" / "prometheus-adapter-values.yaml").read_text()
    )
    (custom,) = adapter["rules"]["custom"]
    assert rule["record"] in custom["seriesQuery"]
    hpa = by_kind(docs, "HorizontalPodAutoscaler")
    (metric,) = hpa["spec"]["metrics"]
    assert metric["pods"]["metric"]["name"] == custom["name"]["as"]
    assert re.fullmatch(custom["name"]["matches"], rule["record"])


def test_kserve_runtime_validates_and_despina_takes_its_arguments() -> None:
    (runtime,) = load(DEPLOY / "kserve" / "cluster-serving-runtime.yaml")
    validate(runtime)
    spec = runtime["spec"]
    formats = {f["name"] for f in spec["supportedModelFormats"]}
    assert formats == {"onnx", "pytorch", "openvino", "triton"}
    assert set(spec["protocolVersions"]) == {"v2", "grpc-v2"}
    (container,) = spec["containers"]
    assert container["command"] == ["despina", "serve"]
    settings = accepted(container["args"])
    assert settings.model_repository == ["/mnt/models"]  # --model-store, as KServe passes it
    assert (settings.http_port, settings.grpc_port) == (8080, 9000)
    (service,) = load(DEPLOY / "kserve" / "inference-service.example.yaml")
    validate(service)
    assert service["spec"]["predictor"]["model"]["runtime"] == runtime["metadata"]["name"]


def test_a_misspelled_field_is_caught() -> None:
    """The CRD schemas are closed: an unknown field fails (not silently accepted)."""
    (runtime,) = load(DEPLOY / "kserve" / "cluster-serving-runtime.yaml")
    runtime["spec"]["supportedModelFormat"] = runtime["spec"].pop("supportedModelFormats")
    with pytest.raises(jsonschema.ValidationError):
        validate(runtime)
    monitor = by_kind(render("cpu"), "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["intervall"] = "15s"
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor)
