"""Time to first token and tokens per second of the example tiny_llm, at concurrency 1
and 8: through the OpenAI frontend (the openai async client, streaming) and in-process
(the same request submitted to the server's FrontendHost, no HTTP), side by side.

    .venv/bin/python plugins/frontend_openai/bench/ttft.py [--requests 24] [--tokens 32]

Builds the example repository in a temporary folder and starts a server on 127.0.0.1
port 0. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import openai
from despina import InferenceRequest
from despina.testing import RunningServer, start_server

ROOT = Path(__file__).resolve().parents[3]
PROMPT = "The harbour town wakes before the sun."


def build(out: Path) -> None:
    spec = importlib.util.spec_from_file_location("llm_build", ROOT / "examples/llm/build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build(out)


async def over_http(client: openai.AsyncOpenAI, tokens: int) -> tuple[float, float, int]:
    """(ttft s, total s, tokens) of one streamed completion through the OpenAI API."""
    start = time.perf_counter()
    first, count = 0.0, 0
    stream = await client.completions.create(
        model="tiny_llm",
        prompt=PROMPT,
        max_tokens=tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].text and not first:
            first = time.perf_counter() - start
        if chunk.usage is not None:
            count = chunk.usage.completion_tokens
    return first, time.perf_counter() - start, count


def in_process(server: RunningServer, tokens: int) -> object:
    """The coroutine that runs one streamed generation through the FrontendHost port."""

    async def run() -> tuple[float, float, int]:
        host = server.server.dataplane  # type: ignore[attr-defined]
        request = InferenceRequest(
            model_name="tiny_llm",
            inputs={
                "text_input": np.array([[PROMPT.encode()]], dtype=object),
                "stream": np.array([[True]]),
                "max_tokens": np.array([[tokens]], np.int32),
                "temperature": np.array([[0.0]], np.float32),
                "return_num_output_tokens": np.array([[True]]),
            },
        )
        start = time.perf_counter()
        first, count = 0.0, 0
        _, stream = host.submit(request, streaming=True)
        async for response in stream:
            if not first:
                first = time.perf_counter() - start
            count += int(response.outputs["num_output_tokens"][0])
        return first, time.perf_counter() - start, count

    return run()


def summarise(label: str, conc: int, runs: list[tuple[float, float, int]], wall: float) -> str:
    ttft = sorted(r[0] * 1e3 for r in runs)
    p99 = ttft[min(len(ttft) - 1, round(0.99 * (len(ttft) - 1)))]
    tokens = sum(r[2] for r in runs)
    per_request = statistics.median(r[2] / r[1] for r in runs)
    return (
        f"| {label} | {conc} | {len(runs)} | {statistics.median(ttft):.1f} | {p99:.1f} | "
        f"{tokens / wall:.0f} | {per_request:.0f} |"
    )


async def batch(
    make: object, conc: int, requests: int
) -> tuple[list[tuple[float, float, int]], float]:
    semaphore = asyncio.Semaphore(conc)

    async def one() -> tuple[float, float, int]:
        async with semaphore:
            return await make()  # type: ignore[operator, no-any-return]

    start = time.perf_counter()
    runs = await asyncio.gather(*(one() for _ in range(requests)))
    return list(runs), time.perf_counter() - start


async def http_batch(
    url: str, tokens: int, conc: int, requests: int
) -> tuple[list[tuple[float, float, int]], float]:
    """One client (its connection pool) for the batch, warmed up by one request first."""
    async with openai.AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0) as client:
        await over_http(client, 4)
        return await batch(lambda: over_http(client, tokens), conc, requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp))
        server = start_server(
            Path(tmp),
            [
                "--allow-openai=true",
                "--openai-port=0",
                "--openai-address=127.0.0.1",
                "--allow-grpc=false",
            ],
        )
        try:
            port = next(f.port for f in server.server.frontends if f.name == "openai")
            url = f"http://127.0.0.1:{port}/v1"
            rows = [
                "| path | concurrency | requests | TTFT p50 ms | TTFT p99 ms | tokens/s (all) | tokens/s (per request, p50) |",
                "| --- | --- | --- | --- | --- | --- | --- |",
            ]
            for conc in (1, 8):
                runs, wall = asyncio.run(http_batch(url, args.tokens, conc, args.requests))
                rows.append(summarise("OpenAI API (HTTP, openai client)", conc, runs, wall))
                runs, wall = server.call(
                    batch(lambda: in_process(server, args.tokens), conc, args.requests)
                )
                rows.append(summarise("in-process (FrontendHost.submit)", conc, runs, wall))
            print("\n".join(rows))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
