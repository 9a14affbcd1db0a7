"""The frontend's own generation metrics, served at ``GET /metrics`` on the OpenAI port in
Prometheus' text format: time to first token and inter-token latency (histograms, ms)
and generated tokens (a counter; its rate is tokens per second), per model.

Recorded on the event loop (no locks): a few additions per streamed response.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

#: Where the frontend's own generation metrics are served on the OpenAI port.
METRICS_PATH = "/metrics"
#: Bucket bounds in milliseconds.
BUCKETS = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0)


@dataclass
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0

    def observe(self, ms: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, ms)] += 1
        self.total += ms

    def lines(self, name: str, model: str) -> list[str]:
        out, running = [], 0
        for bound, count in zip((*BUCKETS, float("inf")), self.counts, strict=True):
            running += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append(f'{name}_bucket{{model="{model}",le="{le}"}} {running}')
        out.append(f'{name}_sum{{model="{model}"}} {self.total}')
        out.append(f'{name}_count{{model="{model}"}} {running}')
        return out


class Metrics:
    """Per-model histograms and counters of the OpenAI frontend."""

    def __init__(self) -> None:
        self.ttft: defaultdict[str, Histogram] = defaultdict(Histogram)
        self.itl: defaultdict[str, Histogram] = defaultdict(Histogram)
        self.tokens: defaultdict[str, int] = defaultdict(int)

    def render(self) -> str:
        families = (
            (
                "despina_openai_time_to_first_token_ms",
                "time to the first generated text",
                self.ttft,
            ),
            ("despina_openai_inter_token_latency_ms", "time between generated responses", self.itl),
        )
        lines: list[str] = []
        for name, text, table in families:
            lines += [f"# HELP {name} {text} (ms)", f"# TYPE {name} histogram"]
            for model, histogram in sorted(table.items()):
                lines += histogram.lines(name, model)
        name = "despina_openai_output_tokens_total"
        lines += [f"# HELP {name} generated tokens", f"# TYPE {name} counter"]
        lines += [f'{name}{{model="{m}"}} {n}' for m, n in sorted(self.tokens.items())]
        return "\n".join(lines) + "\n"
