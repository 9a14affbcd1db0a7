"""What the sequence batcher adds to each request: control tensors and implicit state.

:class:`SequenceControls` reads ``sequence_batching.control_input`` (START, END, READY
with their ``fp32/int32/bool_false_true`` encodings, CORRID with its data type) and builds
the tensors the backend receives beside the client's inputs: shape ``[1]``, or ``[1, 1]``
when the model batches. :class:`StateSpec` describes one ``state`` entry and its initial
value. Config errors are raised as ConfigError with Triton's texts (the controls' checks are
:mod:`despina.repository.validation`'s, which the config pipeline ran before).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from despina.errors import ConfigError
from despina.inference.request import SequenceFlags
from despina.inference.tensors import config_to_datatype, dtype_of
from despina.repository.config import ModelConfig, mc
from despina.repository.paths import safe_join
from despina.repository.validation import bool_encoding, check_corrid, find_control

Kind = mc.ModelSequenceBatching.Control


def numpy_dtype(data_type: int) -> np.dtype[Any]:
    """The numpy dtype of a config ``DataType`` enum value (TYPE_STRING: object)."""
    return dtype_of(config_to_datatype(mc.DataType.Name(data_type)))


@dataclass(frozen=True)
class BoolControl:
    """One START/END/READY control: its tensor name and its false/true values."""

    name: str
    false: np.ndarray
    true: np.ndarray


class SequenceControls:
    """The control tensors of one sequence model."""

    def __init__(self, config: ModelConfig) -> None:
        self.batched = config.max_batch_size > 0
        batching = config.sequence_batching
        name = config.name
        self.start = self._bool(batching, name, Kind.CONTROL_SEQUENCE_START)
        self.end = self._bool(batching, name, Kind.CONTROL_SEQUENCE_END)
        self.ready = self._bool(batching, name, Kind.CONTROL_SEQUENCE_READY)
        self.corrid_name, self.corrid_dtype = self._corrid(batching, name)

    def tensors(
        self, flags: SequenceFlags, corrid: int | str, ready: bool
    ) -> dict[str, np.ndarray]:
        """The control inputs for one request; ``ready`` False for a padding slot (every
        control false and CORRID zero, as Triton sends for a not-ready slot)."""
        out: dict[str, np.ndarray] = {}
        for control, value in (
            (self.start, ready and SequenceFlags.START in flags),
            (self.end, ready and SequenceFlags.END in flags),
            (self.ready, ready),
        ):
            if control is not None:
                out[control.name] = control.true if value else control.false
        if self.corrid_name:
            out[self.corrid_name] = self._corrid_tensor(corrid if ready else 0)
        return out

    def _shape(self) -> tuple[int, ...]:
        return (1, 1) if self.batched else (1,)

    def _corrid_tensor(self, corrid: int | str) -> np.ndarray:
        assert self.corrid_dtype is not None
        if self.corrid_dtype == np.object_:
            text = corrid if isinstance(corrid, str) else str(corrid)
            return np.full(self._shape(), text.encode(), dtype=np.object_)
        value = corrid if isinstance(corrid, int) else 0
        return np.full(self._shape(), value, dtype=self.corrid_dtype)

    def _bool(self, batching: Any, model: str, kind: int) -> BoolControl | None:
        found = find_control(batching, model, kind)
        if found is None:
            return None
        tensor, control = found
        field = bool_encoding(control, model)
        values, dtype = getattr(control, field), _ENCODINGS[field]
        shape = self._shape()
        return BoolControl(
            tensor, np.full(shape, values[0], dtype=dtype), np.full(shape, values[1], dtype=dtype)
        )

    def _corrid(self, batching: Any, model: str) -> tuple[str, np.dtype[Any] | None]:
        found = find_control(batching, model, Kind.CONTROL_SEQUENCE_CORRID)
        if found is None:
            return "", None
        tensor, control = found
        check_corrid(control, model)
        return tensor, numpy_dtype(control.data_type)


#: The numpy dtype of each boolean control encoding.
_ENCODINGS: dict[str, type[np.generic]] = {
    "int32_false_true": np.int32,
    "fp32_false_true": np.float32,
    "bool_false_true": np.bool_,
}


@dataclass(frozen=True)
class StateSpec:
    """One implicit state: the input the backend reads it from, the output it writes it
    to, and the value a sequence starts with."""

    input_name: str
    output_name: str
    initial: np.ndarray
    #: True when the state output is also a declared model output (then the client sees it).
    visible: bool


def state_specs(config: ModelConfig, model_dir: Path | None) -> list[StateSpec]:
    """The model's ``state`` entries with their initial values (zeros unless
    ``initial_state`` gives ``zero_data`` or a ``data_file`` under ``initial_state/``)."""
    outputs = {o.name for o in config.output}
    specs: list[StateSpec] = []
    for state in config.sequence_batching.state:
        initial = _initial_state(config, state, model_dir)
        specs.append(
            StateSpec(state.input_name, state.output_name, initial, state.output_name in outputs)
        )
    return specs


def _initial_state(config: ModelConfig, state: Any, model_dir: Path | None) -> np.ndarray:
    lead = [1] if config.max_batch_size > 0 else []
    dims = lead + [1 if d == -1 else int(d) for d in state.dims]
    dtype = numpy_dtype(state.data_type)
    if len(state.initial_state) > 1:
        raise ConfigError(
            f"initial_state field for state input '{state.input_name}' must contain exactly "
            f"one or zero element. Found '{len(state.initial_state)}' elements."
        )
    if not state.initial_state:
        return _zeros(dims, dtype)
    initial = state.initial_state[0]
    if initial.data_type != state.data_type:
        raise ConfigError(
            f"The data type used for 'initial_state' field of state '{state.input_name}' "
            "does not match the state data type."
        )
    if not initial.name:
        raise ConfigError(
            "Field 'name' must be set when using initial_state for state input "
            f"'{state.input_name}'."
        )
    if len(initial.dims) != len(state.dims):
        raise ConfigError(
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' "
            f"dimensions for state input '{state.input_name}'. "
            f"{len(initial.dims)} != {len(state.dims)}"
        )
    for given, declared in zip(initial.dims, state.dims, strict=True):
        if given == -1:
            raise ConfigError(
                f"'initial_state' field for state input name '{state.input_name}' contains "
                "variable dimensions."
            )
        if declared != -1 and given != declared:
            raise ConfigError(
                f"'initial_state' dim for input name '{state.input_name}' doesn't match "
                f"'state' dim description. {given} != {declared}"
            )
    dims = lead + [int(d) for d in initial.dims]
    which = initial.WhichOneof("state_data")
    if which == "zero_data":
        return _zeros(dims, dtype)
    if which == "data_file":
        return _from_file(state, initial.data_file, dims, dtype, model_dir)
    raise ConfigError(
        f"initial_state setting expects state'{state.input_name}' to have state_data set"
    )


def _zeros(dims: list[int], dtype: np.dtype[Any]) -> np.ndarray:
    if dtype == np.object_:
        return np.full(dims, b"", dtype=np.object_)
    return np.zeros(dims, dtype=dtype)


def _from_file(
    state: Any, data_file: str, dims: list[int], dtype: np.dtype[Any], model_dir: Path | None
) -> np.ndarray:
    if model_dir is None:
        raise ConfigError(f"initial_state data file '{data_file}' has no model folder to read from")
    path = safe_join(model_dir / "initial_state", data_file, "initial_state data file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"unable to read initial_state file '{data_file}': {exc.strerror}"
        ) from None
    if dtype == np.object_:
        return np.full(dims, data, dtype=np.object_)
    size = int(np.prod(dims)) * dtype.itemsize
    if size > len(data):
        raise ConfigError(
            f"initial_state setting expects {size} bytes, but the data provided from "
            f"{data_file}only has {len(data)} bytes."
        )
    return np.frombuffer(data[:size], dtype=dtype).reshape(dims).copy()
