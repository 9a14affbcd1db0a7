"""Model warm-up (``model_warmup`` in the config), run on every instance before READY.

Each sample builds one request of ``batch_size`` (the batch dimension is added when the
model batches) with zero, random or file data, and runs it ``count`` times (at least once)
on each instance. Any error fails the model's load, naming the sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from despina.errors import ConfigError, Internal
from despina.inference.request import InferenceRequest, ResponseStream
from despina.inference.tensors import config_to_datatype, deserialize_bytes, dtype_of, element_count
from despina.plugin.backend import ModelInstance
from despina.repository.config import ModelConfig, mc
from despina.repository.paths import safe_join

#: Warm-up data files live in ``<model_dir>/warmup/``, as in Triton.
WARMUP_DIR = "warmup"


def warmup_requests(
    config: ModelConfig, model_dir: Path
) -> list[tuple[str, int, InferenceRequest]]:
    """(sample name, repetitions, request) for every warm-up sample of the config."""
    samples = []
    for sample in config.model_warmup:
        batch = max(int(sample.batch_size), 1)
        if config.max_batch_size == 0 and batch > 1:
            raise ConfigError(
                f"model '{config.name}': warm-up '{sample.name}' batch_size must be 1"
            )
        inputs = {
            name: _input_array(config, model_dir, sample.name, name, spec, batch)
            for name, spec in sample.inputs.items()
        }
        request = InferenceRequest(config.name, inputs, id=f"warmup:{sample.name}")
        samples.append((sample.name, max(int(sample.count), 1), request))
    return samples


def _input_array(
    config: ModelConfig, model_dir: Path, sample: str, name: str, spec: Any, batch: int
) -> np.ndarray:
    datatype = config_to_datatype(mc.DataType.Name(spec.data_type))
    dims = [int(d) for d in spec.dims]
    shape = ([batch] if config.max_batch_size > 0 else []) + dims
    count = element_count(shape)
    kind = spec.WhichOneof("input_data_type")
    if datatype == "BYTES":
        if kind == "input_data_file":
            data = _read(model_dir, sample, spec.input_data_file)
            return deserialize_bytes(data, None)[:count].reshape(shape)
        out = np.empty(count, dtype=np.object_)
        out[:] = [b"0" * 4 if kind == "random_data" else b""] * count
        return out.reshape(shape)
    dtype = dtype_of(datatype)
    if kind == "zero_data" or kind is None:
        return np.zeros(shape, dtype=dtype)
    if kind == "random_data":
        rng = np.random.default_rng(0)
        return rng.integers(0, 2, size=shape).astype(dtype)
    data = _read(model_dir, sample, spec.input_data_file)
    single = np.frombuffer(data, dtype=dtype)
    per_item = element_count(dims)
    if single.size < per_item:
        raise ConfigError(
            f"model '{config.name}': warm-up '{sample}' file for '{name}' is too short"
        )
    item = single[:per_item].reshape(dims)
    return np.broadcast_to(item, shape).copy() if config.max_batch_size > 0 else item.copy()


def _read(model_dir: Path, sample: str, filename: str) -> bytes:
    path = safe_join(model_dir / WARMUP_DIR, filename, f"warm-up '{sample}' data file")
    if not path.is_file():
        raise ConfigError(f"warm-up '{sample}': data file '{filename}' not found in {WARMUP_DIR}/")
    return path.read_bytes()


async def warm_up(config: ModelConfig, model_dir: Path, instances: list[ModelInstance]) -> None:
    """Run every sample on every instance; raise Internal naming the failing sample."""
    samples = warmup_requests(config, model_dir)
    for instance in instances:
        for sample_name, repetitions, request in samples:
            for _ in range(repetitions):
                await _run_once(config.name, sample_name, instance, request)


async def _run_once(
    model: str, sample: str, instance: ModelInstance, template: InferenceRequest
) -> None:
    request = InferenceRequest(template.model_name, dict(template.inputs), id=template.id)
    stream = ResponseStream()
    request.stream = stream
    try:
        responses = await instance.execute([request])
    except Exception as exc:  # noqa: BLE001 - reported as a load failure
        raise Internal(f"model '{model}' warm-up '{sample}' failed: {exc}") from None
    if responses is None:
        stream.send(None, final=True)
        errors = [r.error async for r in stream if r.error is not None]
    else:
        errors = [r.error for r in responses if r.error is not None]
    if errors:
        raise Internal(f"model '{model}' warm-up '{sample}' failed: {errors[0]}")
