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
pytest.importorskip("openai")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[3]
LOG_NAME = "cancelled.log"

#: Streams SCRIPT's words (or a tool call when the prompt asks for the weather), 30 ms
#: apart, one response per word with its token count; stops when cancelled and notes it.
SCRIPTED = """
import os, threading, time
import numpy as np
import triton_python_backend_utils as pb_utils

SCRIPT = "one two three four five six seven eight nine ten".split()
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'


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
            pieces = [CALL[i:i + 7] for i in range(0, len(CALL), 7)] if "weather" in prompt else [
                w + " " for w in (SCRIPT * 10)[:limit]]
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
    scripted = out / "scripted"
    (scripted / "1").mkdir(parents=True)
    (scripted / "config.pbtxt").write_text(SCRIPTED_CONFIG)
    (scripted / "1" / "model.py").write_text(SCRIPTED)
    # the scripted model chats with the example tokenizer's template
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(out / "tiny_llm" / "1" / name, scripted / "1" / name)
    return out


@pytest.fixture(scope="session")
def server(repository: Path) -> Iterator[RunningServer]:
    running = start_server(repository, ARGS)
    yield running
    running.stop()


@pytest.fixture(scope="session")
def base_url(server: RunningServer) -> str:
    port = next(f.port for f in server.server.frontends if f.name == "openai")
    return f"http://127.0.0.1:{port}/v1"
