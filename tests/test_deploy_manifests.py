"""deploy/: the Kustomize overlays (cpu, gpu) render with ``kubectl kustomize`` and every
object validates offline: core kinds against Kubernetes' OpenAPI schemas
(``kubernetes-validate``, strict), the Prometheus-operator and KServe kinds against the
fields of their published CRDs (tests/data/deploy_schemas, sources named in each file).
The server arguments each manifest gives are parsed by Despina's own command line, and the
KServe runtime advertises exactly the model formats the default image (deploy/container)
installs a backend for."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from despina.plugin.manager import create_plugins
from despina.serving.flags import parse_settings

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
SCHEMAS = Path(__file__).with_name("data") / "deploy_schemas"
#: Kubernetes version whose schemas the core kinds are checked against.
KUBERNETES = "1.32.0"
OVERLAYS = ("cpu", "gpu")
PLUGINS = ROOT / "plugins"
#: The KServe model format each backend plugin (its folder under plugins/) serves, and the
#: package it needs at run time, which the image has only as a required dependency.
KSERVE_FORMATS = {
    "backend_onnx": ("onnx", "onnxruntime"),
    "backend_torch": ("pytorch", "torch"),
    "backend_openvino": ("openvino", "openvino"),
    "backend_trt": ("tensorrt", "tensorrt"),
}
#: Backends with no KServe format of their own: their models come as `triton` repositories
#: (backend_qa: Triton's test backends, for Triton's own test suites; never in an image).
TRITON_ONLY = {"backend_python", "backend_qa"}

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
    assert formats == {"onnx", "triton"}
    assert set(spec["protocolVersions"]) == {"v2", "grpc-v2"}
    (container,) = spec["containers"]
    assert container["command"] == ["despina", "serve"]
    settings = accepted(container["args"])
    assert settings.model_repository == ["/mnt/models"]  # --model-store, as KServe passes it
    assert (settings.http_port, settings.grpc_port) == (8080, 9000)
    (service,) = load(DEPLOY / "kserve" / "inference-service.example.yaml")
    validate(service)
    assert service["spec"]["predictor"]["model"]["runtime"] == runtime["metadata"]["name"]


def image_plugins() -> list[str]:
    """The plugins the default image installs: the Containerfile's ``ARG PLUGINS``
    default, which build.sh passes on unchanged unless ``$PLUGINS`` is set."""
    containerfile = (DEPLOY / "container" / "Containerfile").read_text()
    (default,) = re.findall(r'^ARG PLUGINS="([^"]*)"$', containerfile, re.M)
    build = (DEPLOY / "container" / "build.sh").read_text()
    assert "${PLUGINS:+--build-arg" in build and "PLUGINS:-" not in build
    names = default.split()
    for name in names:
        assert (PLUGINS / name / "pyproject.toml").is_file(), f"no plugin {name!r}"
    return names


def required_packages(plugin: str) -> set[str]:
    """The distribution names a plugin requires (not its extras)."""
    project = tomllib.loads((PLUGINS / plugin / "pyproject.toml").read_text())["project"]
    names = (re.match(r"[A-Za-z0-9._-]+", dep) for dep in project.get("dependencies", []))
    return {m.group(0).lower().replace("_", "-") for m in names if m}


def test_kserve_runtime_formats_are_what_the_default_image_serves() -> None:
    """Every format the runtime advertises has its backend, with its framework, in the
    image it runs (and none it could serve is left out): parsed from the Containerfile
    and the plugins' pyproject.toml, so neither can change without the other."""
    backends = {p.name for p in PLUGINS.iterdir() if p.name.startswith("backend_")}
    unmapped = backends - KSERVE_FORMATS.keys() - TRITON_ONLY
    assert not unmapped, f"say which KServe format these serve (or none): {sorted(unmapped)}"
    plugins = image_plugins()
    served = {"triton"} if {"frontend_http", "frontend_grpc"} <= set(plugins) else set()
    for plugin in plugins:
        if plugin in KSERVE_FORMATS:
            kserve_format, framework = KSERVE_FORMATS[plugin]
            if framework in required_packages(plugin):
                served.add(kserve_format)
    (runtime,) = load(DEPLOY / "kserve" / "cluster-serving-runtime.yaml")
    advertised = {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    assert advertised == served, (
        f"the runtime advertises {sorted(advertised)}; the default image "
        f"(PLUGINS={' '.join(plugins)!r}) serves {sorted(served)}"
    )
    assert runtime["spec"]["containers"][0]["image"].endswith(":cpu")  # VARIANT=cpu


def test_the_default_image_serves_at_least_what_despina_serve_extra_installs() -> None:
    """``pip install 'despina[serve]'`` (the HTTP and gRPC frontends, metrics, the Python
    backend) is the documented common set: the default image holds every part of it."""
    core = tomllib.loads((ROOT / "core" / "pyproject.toml").read_text())["project"]
    extra = {
        re.sub(r"[^A-Za-z0-9._-].*", "", dep) for dep in core["optional-dependencies"]["serve"]
    }
    distribution = {
        name: tomllib.loads((PLUGINS / name / "pyproject.toml").read_text())["project"]["name"]
        for name in image_plugins()
    }
    missing = extra - set(distribution.values())
    assert not missing, f"the default image (deploy/container, PLUGINS) lacks {sorted(missing)}"


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
