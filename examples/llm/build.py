"""Build the example text models into a model repository: ``python examples/llm/build.py OUT``.

Nothing is downloaded. A byte-level BPE tokenizer is trained on ``corpus.txt`` (kept in
this folder) and saved with ``chat_template.jinja`` in its ``tokenizer_config.json``;
two models get random weights from a fixed seed:

- ``tiny_llm``: a 2-layer Llama (hidden 64), a decoupled Python model that generates
  token by token with a KV cache (``llm_model.py``), with two LoRA adapters listed in
  ``1/multi_lora.json`` as Triton's OpenAI frontend reads them;
- ``tiny_embed``: a 2-layer BERT encoder whose mean-pooled hidden states are the
  embedding (``embed_model.py``).

The same seed gives the same weights, so a test can build the repository at its start
(a few seconds on CPU) instead of keeping weight files in git.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 0
VOCAB_SIZE = 512
HIDDEN = 64
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
#: LoRA adapters of tiny_llm: name -> rank (the adapter changes the output head).
ADAPTERS = {"terse": 4, "chatty": 8}

LLM_CONFIG = """name: "tiny_llm"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [
  {{ name: "text_input" data_type: TYPE_STRING dims: [ 1, 1 ] }},
{optional}
]
output [
  {{ name: "text_output" data_type: TYPE_STRING dims: [ 1, -1 ] }},
  {{ name: "num_input_tokens" data_type: TYPE_UINT32 dims: [ 1 ] }},
  {{ name: "num_output_tokens" data_type: TYPE_UINT32 dims: [ 1 ] }},
  {{ name: "logprobs" data_type: TYPE_STRING dims: [ 1 ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""

#: The optional inputs of tiny_llm: Triton's OpenAI frontend's names for Python and
#: TensorRT-LLM models, plus return_logprobs / top_logprobs (Despina's) and
#: TensorRT-LLM's guided decoding pair (structured output).
LLM_OPTIONAL_INPUTS = {
    "stream": ("TYPE_BOOL", "1, 1"),
    "max_tokens": ("TYPE_INT32", "1, 1"),
    "stop_words": ("TYPE_STRING", "1, -1"),
    "temperature": ("TYPE_FP32", "1, 1"),
    "top_p": ("TYPE_FP32", "1, 1"),
    "seed": ("TYPE_UINT64", "1, 1"),
    "frequency_penalty": ("TYPE_FP32", "1, 1"),
    "presence_penalty": ("TYPE_FP32", "1, 1"),
    "exclude_input_in_output": ("TYPE_BOOL", "1, 1"),
    "lora_task_id": ("TYPE_UINT64", "1, 1"),
    "lora_weights": ("TYPE_FP32", "-1"),
    "lora_config": ("TYPE_INT32", "-1"),
    "return_num_input_tokens": ("TYPE_BOOL", "1, 1"),
    "return_num_output_tokens": ("TYPE_BOOL", "1, 1"),
    "return_logprobs": ("TYPE_BOOL", "1, 1"),
    "top_logprobs": ("TYPE_INT32", "1, 1"),
    "guided_decoding_guide_type": ("TYPE_STRING", "1, 1"),
    "guided_decoding_guide": ("TYPE_STRING", "1, 1"),
}

EMBED_CONFIG = """name: "tiny_embed"
backend: "python"
max_batch_size: 0
input [
  { name: "embedding_request" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "return_num_input_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "num_input_tokens" data_type: TYPE_UINT32 dims: [ 1 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def train_tokenizer(folder: Path) -> None:
    """A byte-level BPE tokenizer trained on corpus.txt, saved with the chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train([str(HERE / "corpus.txt")], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    fast.chat_template = (HERE / "chat_template.jinja").read_text()
    fast.save_pretrained(folder)


def build_llm(version: Path, repository: Path) -> None:
    """tiny_llm's weights (hf/), its tokenizer, model.py and its LoRA adapters."""
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(version / "hf")
    shutil.copy(HERE / "llm_model.py", version / "model.py")
    rng = np.random.default_rng(SEED)
    listing = {}
    for name, rank in ADAPTERS.items():
        folder = version / "lora" / name
        folder.mkdir(parents=True)
        down = rng.normal(0, 0.5, (rank, HIDDEN)).astype(np.float32)
        up = rng.normal(0, 0.5, (VOCAB_SIZE, rank)).astype(np.float32)
        np.save(folder / "model.lora_weights.npy", np.concatenate([down.ravel(), up.ravel()]))
        np.save(folder / "model.lora_config.npy", np.array([rank, HIDDEN, VOCAB_SIZE], np.int32))
        listing[name] = folder.relative_to(repository).as_posix()
    (version / "multi_lora.json").write_text(json.dumps(listing, indent=2) + "\n")


def build_embed(version: Path) -> None:
    """tiny_embed's weights (hf/), its tokenizer and model.py."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(SEED)
    config = BertConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=512,
    )
    BertModel(config).save_pretrained(version / "hf")
    shutil.copy(HERE / "embed_model.py", version / "model.py")


def build(repository: Path) -> Path:
    """Write tiny_llm and tiny_embed under ``repository`` (created); return it."""
    optional = ",\n".join(
        f'  {{ name: "{name}" data_type: {dtype} dims: [ {dims} ] optional: true }}'
        for name, (dtype, dims) in LLM_OPTIONAL_INPUTS.items()
    )
    for name, config in (
        ("tiny_llm", LLM_CONFIG.format(optional=optional)),
        ("tiny_embed", EMBED_CONFIG),
    ):
        version = repository / name / "1"
        if version.parent.exists():
            shutil.rmtree(version.parent)
        version.mkdir(parents=True)
        (version.parent / "config.pbtxt").write_text(config)
        train_tokenizer(version)
    build_llm(repository / "tiny_llm" / "1", repository)
    build_embed(repository / "tiny_embed" / "1")
    return repository


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="model repository to write (created)")
    args = parser.parse_args()
    print(build(args.out_dir.resolve()))


if __name__ == "__main__":
    main()
