"""The exporter tests' toy model, and scraping ``/metrics``, read with prometheus-client's
parser."""

from __future__ import annotations

import contextlib
import re
import urllib.request

import numpy as np
from despina.errors import InvalidArgument
from despina.inference.request import InferenceRequest
from despina.testing import RunningServer
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

LOOPBACK = ("--metrics-address=127.0.0.1", "--http-address=127.0.0.1", "--grpc-address=127.0.0.1")
TOY = """
backend: "toy"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def infer(running: RunningServer, value_: float) -> None:
    """One request to the toy model (which fails negative inputs) through the server."""
    inputs = {"INPUT0": np.full(4, value_, np.float32), "INPUT1": np.ones(4, np.float32)}
    with contextlib.suppress(InvalidArgument):
        running.call(running.server.infer(InferenceRequest("toy", inputs)))


def scrape(running: RunningServer) -> str:
    with urllib.request.urlopen(running.metrics_url) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return str(response.read().decode())


def samples(text: str) -> list[tuple[str, str, Sample]]:
    """(family type, sample name as exposed, sample) of every sample. The parser names a
    counter's samples ``<name>_total``; Triton's counters have no suffix, so the name is
    taken back from the text where it has none."""
    found = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            renamed = family.type == "counter" and name == f"{family.name}_total"
            if renamed and not re.search(rf"^{re.escape(name)}[{{ ]", text, re.MULTILINE):
                name = family.name
            found.append((family.type, name, sample))
    return found


def exported_names(text: str) -> set[str]:
    """Every series name a PromQL query may select in ``text``."""
    return {name for _, name, _ in samples(text)}


def value(text: str, name: str, **labels: str) -> float:
    """The value of the one sample ``name{labels}`` (exactly those labels)."""
    matches = [s.value for _, n, s in samples(text) if n == name and s.labels == labels]
    assert len(matches) == 1, f"{len(matches)} samples {name}{labels} in:\n{text}"
    return float(matches[0])


def family_types(text: str) -> dict[str, str]:
    """``# TYPE`` of every family, by the name the text gives it."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))


def family_help(text: str) -> dict[str, str]:
    """``# HELP`` of every family, by the name the text gives it."""
    return dict(re.findall(r"^# HELP (\S+) (.*)$", text, re.MULTILINE))
