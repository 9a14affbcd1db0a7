"""One real server for the OpenAI tests: the example models (built here from
examples/llm, no downloads) and a scripted decoupled model, on 127.0.0.1 port 0."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from despina.testing import RunningServer, start_server

pytest.importorskip("despina_backend_python")
openai = pytest.importorskip("openai")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[3]
LOG_NAME = "cancelled.log"
LAST_NAME = "last_request.json"

#: Streams SCRIPT's words (or a tool call when the prompt asks for the weather), 30 ms
#: apart, one response per word with its token count; stops when cancelled and notes it.
SCRIPTED = """
import os, threading, time
import numpy as np
import triton_python_backend_utils as pb_utils

SCRIPT = "one two three four five six seven eight nine ten".split()
ARGS = '{"name": "get_weather", "arguments": {"city": "Oslo", "days": [1, 2]}}'
CALLS = {  # by the first word of these in the prompt: a call in a parser's format, or broken
    "mistral": "[TOOL_CALLS][" + ARGS + "]",
    "broken": '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"]}</tool_call>',
    "weather": "<tool_call>" + ARGS + "</tool_call>",
}


def pieces_of(prompt, limit):
    call = next((text for word, text in CALLS.items() if word in prompt), None)
    if call is None:
        return [w + " " for w in (SCRIPT * 10)[:limit]]
    return [call[i:i + 7] for i in range(0, len(call), 7)][:limit]


def value(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        self.log = os.path.join(args["model_repository"], "LOG_NAME")

    def execute(self, requests):
        for request in requests:
            prompt = value(request, "text_input", b"").decode()
            stream = bool(value(request, "stream", False))
            limit = int(value(request, "max_tokens", 16))
            sender = request.get_response_sender()
            pieces = pieces_of(prompt.split("user")[-1], limit)
            threading.Thread(target=self.run, args=(sender, pieces, stream)).start()
        return None

    def send(self, sender, text, count):
        sender.send(pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("text_output", np.array([[text.encode()]], dtype=object)),
            pb_utils.Tensor("num_input_tokens", np.array([3], np.uint32)),
            pb_utils.Tensor("num_output_tokens", np.array([count], np.uint32)),
        ]))

    def run(self, sender, pieces, stream):
        for piece in pieces:
            if sender.is_cancelled():
                with open(self.log, "w") as f:
                    f.write("cancelled")
                return
            if stream:
                self.send(sender, piece, 1)
                time.sleep(0.03)
        if not stream:
            self.send(sender, "".join(pieces), len(pieces))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
""".replace("LOG_NAME", LOG_NAME)

SCRIPTED_CONFIG = """name: "scripted"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1, 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1, 1 ] optional: true },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1, 1 ] optional: true }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ 1, -1 ] },
  { name: "num_input_tokens" data_type: TYPE_UINT32 dims: [ 1 ] },
  { name: "num_output_tokens" data_type: TYPE_UINT32 dims: [ 1 ] }
]
parameters { key: "DESPINA_EXECUTION_MODE" value { string_value: "in-process" } }
"""

#: A model in vLLM's request format: text_input and sampling_parameters (JSON), shaped
#: [1]. Generates WORDS honouring max_tokens and stop (cut before the stop string, as
#: vLLM), the prompt first when exclude_input_in_output is false; notes what it got in
#: LAST_NAME (input shapes and the parsed sampling parameters).
VLLM_ECHO = """
import json, os
import numpy as np
import triton_python_backend_utils as pb_utils

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()


def value(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        self.log = os.path.join(args["model_repository"], "LAST_NAME")

    def execute(self, requests):
        for request in requests:
            params = json.loads(value(request, "sampling_parameters", b"{}"))
            shapes = {t.name(): list(t.as_numpy().shape) for t in request.inputs()}
            with open(self.log, "w") as f:
                json.dump({"inputs": shapes, "sampling": params}, f)
            prompt = value(request, "text_input", b"").decode()
            stops = params.get("stop") or []
            stops = [stops] if isinstance(stops, str) else stops
            text, pieces = "", []
            for word in (WORDS * 10)[: params.get("max_tokens", 16)]:
                text += word + " "
                cut = min((text.find(s) for s in stops if s in text), default=-1)
                if cut >= 0:
                    pieces.append(text[: cut][len("".join(pieces)):])
                    break
                pieces.append(word + " ")
            if not value(request, "exclude_input_in_output", True):
                pieces.insert(0, prompt)
            sender = request.get_response_sender()
            if not value(request, "stream", False):
                pieces = ["".join(pieces)]
            for piece in pieces:
                sender.send(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("text_output", np.array([piece.encode()], dtype=object)),
                    pb_utils.Tensor("num_input_tokens", np.array([len(prompt.split())], np.uint32)),
                    pb_utils.Tensor("num_output_tokens", np.array([len(piece.split())], np.uint32)),
                ]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
""".replace("LAST_NAME", LAST_NAME)

VLLM_ECHO_CONFIG = """name: "vllm_echo"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true },
  { name: "exclude_input_in_output" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "return_num_input_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "return_num_output_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "num_input_tokens" data_type: TYPE_UINT32 dims: [ 1 ] },
  { name: "num_output_tokens" data_type: TYPE_UINT32 dims: [ 1 ] }
]
parameters { key: "DESPINA_EXECUTION_MODE" value { string_value: "in-process" } }
"""

ARGS = [
    "--allow-openai=true",
    "--openai-port=0",
    "--openai-address=127.0.0.1",
    "--tool-call-parser=hermes",
    "--lora-separator=_lora_",
    "--openai-restricted-api",
    "metrics",
    "admin-key",
    "secret",
    "--allow-grpc=false",
    "--http-address=127.0.0.1",
    "--metrics-address=127.0.0.1",
    "--metrics-config=histogram_latencies=true",
]


def _build_examples(out: Path) -> None:
    spec = importlib.util.spec_from_file_location("llm_build", ROOT / "examples/llm/build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build(out)


@pytest.fixture(scope="session")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("openai") / "models"
    _build_examples(out)
    for name, config, source in (
        ("scripted", SCRIPTED_CONFIG, SCRIPTED),
        ("vllm_echo", VLLM_ECHO_CONFIG, VLLM_ECHO),
    ):
        _write_model(out, name, config, source)
    return out


def _write_model(out: Path, name: str, config: str, source: str) -> None:
    """A Python model in ``out`` that chats with the example tokenizer's template."""
    folder = out / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(config)
    (folder / "1" / "model.py").write_text(source)
    for file in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(out / "tiny_llm" / "1" / file, folder / "1" / file)


@pytest.fixture(scope="session")
def forced_client(
    repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[openai.OpenAI]:
    """A second server over copies of the scripted and vLLM models, with Triton's
    ``--backend tensorrtllm`` forcing one request format and the mistral parser."""
    out = tmp_path_factory.mktemp("forced") / "models"
    for name in ("scripted", "vllm_echo"):
        shutil.copytree(repository / name, out / name)
    args = [a for a in ARGS if not a.startswith("--tool-call-parser")]
    running = start_server(out, [*args, "--backend=tensorrtllm", "--tool-call-parser=mistral"])
    port = next(f.port for f in running.server.frontends if f.name == "openai")
    url = f"http://127.0.0.1:{port}/v1"
    with openai.OpenAI(base_url=url, api_key="EMPTY", max_retries=0, timeout=60) as client:
        yield client
    running.stop()


@pytest.fixture(scope="session")
def server(repository: Path) -> Iterator[RunningServer]:
    running = start_server(repository, ARGS)
    yield running
    running.stop()


@pytest.fixture(scope="session")
def base_url(server: RunningServer) -> str:
    port = next(f.port for f in server.server.frontends if f.name == "openai")
    return f"http://127.0.0.1:{port}/v1"
