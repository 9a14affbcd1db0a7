"""Model configuration: ``config.pbtxt`` <-> Triton's ``inference.ModelConfig``.

The schema is Triton's own protobuf (:mod:`despina.triton_proto`, read from the module
shipped in ``tritonclient``); ``config.pbtxt`` is parsed with protobuf's text format, so an unknown field or bad value
is an error naming the file, line and field. :func:`check_file_names` and
:mod:`despina.repository.validation` check what Triton checks before a model loads;
:mod:`despina.repository.config_pipeline` runs them, in order with the steps that complete a config.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format

from despina.errors import ConfigError, InvalidArgument
from despina.repository.paths import relative_parts
from despina.triton_proto import model_config as mc

ModelConfig = mc.ModelConfig

CONFIG_FILENAME = "config.pbtxt"

__all__ = [
    "BACKEND_TO_PLATFORM",
    "CONFIG_FILENAME",
    "ENSEMBLE_PLATFORM",
    "PLATFORM_TO_BACKEND",
    "TRITON_PLATFORMS",
    "ModelConfig",
    "backend_name",
    "config_json",
    "mc",
    "parameters_of",
    "parse_json",
    "parse_text",
    "read_model_config",
    "to_json_dict",
]

#: Triton platform name -> the backend that serves it.
PLATFORM_TO_BACKEND: dict[str, str] = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorrt_plan": "tensorrt",
    "openvino": "openvino",
    "python": "python",
    "tensorflow_graphdef": "tensorflow",
    "tensorflow_savedmodel": "tensorflow",
}
BACKEND_TO_PLATFORM: dict[str, str] = {
    "onnxruntime": "onnxruntime_onnx",
    "pytorch": "pytorch_libtorch",
    "tensorrt": "tensorrt_plan",
}
ENSEMBLE_PLATFORM = "ensemble"
#: The platforms tritonserver 2.51 knows; any other ``platform`` (without ``backend``)
#: fails its load ("unexpected platform type"). ``python`` and ``openvino`` are
#: Despina's additions (mapped above).
TRITON_PLATFORMS: tuple[str, ...] = (
    "ensemble",
    "onnxruntime_onnx",
    "pytorch_libtorch",
    "tensorflow_graphdef",
    "tensorflow_savedmodel",
    "tensorrt_plan",
)


def unknown_platform_text(platform: str, model_name: str, known: list[str]) -> str:
    """Triton's text for a ``platform`` it does not know, with the known platforms and,
    where one is close, the likely fix (``onnxruntime`` is a backend name)."""
    text = f"unexpected platform type '{platform}' for {model_name}"
    backends = {backend: p for p, backend in PLATFORM_TO_BACKEND.items() if p != backend}
    if platform in backends:
        hint = (
            f"'{platform}' is a backend, not a platform: write backend: \"{platform}\" "
            f'(or platform: "{backends[platform]}")'
        )
    else:
        import difflib

        close = difflib.get_close_matches(platform, known, n=1, cutoff=0.6)
        hint = f'did you mean platform: "{close[0]}"?' if close else ""
    text += f"; known platforms: {', '.join(sorted(known))}"
    return f"{text}; {hint}" if hint else text


def parse_text(text: str, source: str = CONFIG_FILENAME) -> mc.ModelConfig:
    """Parse config text; raise ConfigError naming ``source``, line, column and field."""
    config = mc.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        line, column = exc.GetLine(), exc.GetColumn()
        detail = str(exc).split(" : ", 1)[-1]
        raise ConfigError(f"{source}:{line}:{column}: {detail}") from None
    except ValueError as exc:  # protobuf's own checks, e.g. an enum number out of range
        raise ConfigError(f"{source}: {exc}") from None
    return config


def parse_json(text: str | bytes, source: str = "config") -> mc.ModelConfig:
    """Parse a JSON config (the repository load extension's ``config`` parameter). As
    Triton's protobuf JSON parser, a repeated field given one value (``"instance_group":
    {...}``) holds that one value."""
    config = mc.ModelConfig()
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        document = None  # json_format reports it as before
    if isinstance(document, dict):
        text = json.dumps(_repeated_as_lists(document, config.DESCRIPTOR))
    try:
        json_format.Parse(text, config)
    except (json_format.ParseError, ValueError) as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return config


def _repeated_as_lists(document: dict[str, Any], descriptor: Any) -> dict[str, Any]:
    """``document`` with every repeated field's single value (not a list) in a list of
    one, in nested messages too; map fields and unknown names are left as they are."""
    fields = {f.name: f for f in descriptor.fields} | {f.json_name: f for f in descriptor.fields}
    out: dict[str, Any] = {}
    for key, value in document.items():
        field = fields.get(key)
        if field is None:
            out[key] = value
            continue
        message = field.message_type
        is_map = message is not None and message.GetOptions().map_entry
        # is_repeated: protobuf 6's name for label == LABEL_REPEATED (deprecated there)
        repeated = (
            field.is_repeated
            if hasattr(field, "is_repeated")
            else field.label == field.LABEL_REPEATED
        )
        if repeated and not is_map and not isinstance(value, list):
            value = [value]
        if message is not None and not is_map:
            if isinstance(value, list):
                value = [
                    _repeated_as_lists(v, message) if isinstance(v, dict) else v for v in value
                ]
            elif isinstance(value, dict):
                value = _repeated_as_lists(value, message)
        out[key] = value
    return out


def read_model_config(model_dir: Path) -> tuple[mc.ModelConfig, bool]:
    """Read ``<model_dir>/config.pbtxt``; return (config, whether the file existed)."""
    path = model_dir / CONFIG_FILENAME
    if not path.is_file():
        return mc.ModelConfig(), False
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{model_dir.name}/{CONFIG_FILENAME}: cannot read: {exc}") from None
    return parse_text(text, f"{model_dir.name}/{CONFIG_FILENAME}"), True


def to_json_dict(config: mc.ModelConfig) -> dict[str, Any]:
    """The config as Triton's model-configuration JSON (proto field names, defaults shown).

    Triton prints 64-bit integers as JSON numbers, unlike protobuf's JSON mapping, and
    every message's keys in the proto's declaration order; both are restored here.
    """
    as_dict = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    result: dict[str, Any] = _as_triton_prints(config, as_dict)
    return result


def _as_triton_prints(message: Any, data: Any) -> Any:
    """Walk a MessageToDict result: int64 fields (strings) become numbers, and each
    message's keys follow the proto's declaration order (MessageToDict puts the fields
    with no presence last)."""
    from google.protobuf.descriptor import FieldDescriptor

    int64_types = {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
    for field in message.DESCRIPTOR.fields:
        key = field.name
        if key not in data:
            continue
        value = getattr(message, key)
        if field.type in int64_types:
            data[key] = [int(v) for v in data[key]] if _is_repeated(field) else int(data[key])
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                    for map_key, item in value.items():
                        _as_triton_prints(item, data[key][str(map_key)])
                elif value_field.type in int64_types:
                    data[key] = {k: int(v) for k, v in data[key].items()}
            elif _is_repeated(field):
                for item, item_data in zip(value, data[key], strict=True):
                    _as_triton_prints(item, item_data)
            else:
                _as_triton_prints(value, data[key])
    ordered = {f.name: data[f.name] for f in message.DESCRIPTOR.fields if f.name in data}
    data.clear()
    data.update(ordered)
    return data


def _is_repeated(field: Any) -> bool:
    return bool(field.is_repeated)


def backend_name(config: mc.ModelConfig) -> str:
    """The backend that serves a config: ``backend``, else mapped from ``platform``."""
    if config.backend:
        return str(config.backend)
    return PLATFORM_TO_BACKEND.get(config.platform, "")


def check_file_names(config: mc.ModelConfig, model_name: str) -> None:
    """Raise ConfigError when a field naming a file in the model folder
    (``default_model_filename``, ``cc_model_filenames``, an output's ``label_filename``,
    a warm-up input's ``input_data_file``) is absolute, holds ``..`` or is otherwise no
    relative path (:func:`despina.repository.paths.relative_parts`). A config comes from the
    repository or from a client's load request alike."""
    named = [("default_model_filename", config.default_model_filename)]
    named += [("cc_model_filenames", f) for f in config.cc_model_filenames.values()]
    named += [("label_filename", o.label_filename) for o in config.output]
    named += [
        ("input_data_file", i.input_data_file)
        for sample in config.model_warmup
        for i in sample.inputs.values()
        if i.WhichOneof("input_data_type") == "input_data_file"
    ]
    for field, value in named:
        if value:
            try:
                relative_parts(value, field)
            except InvalidArgument as exc:
                raise ConfigError(f"model '{model_name}': {exc}") from None


def parameters_of(config: mc.ModelConfig) -> dict[str, str]:
    """The config's ``parameters`` as a plain ``{key: string_value}`` dict."""
    return {key: value.string_value for key, value in config.parameters.items()}


def number_parameter(parameters: Mapping[str, str], key: str, default: float, unit: str) -> float:
    """The non-negative number in parameter ``key`` (``default`` when absent or empty).

    Raises ConfigError naming the key and ``unit`` when it is not a number >= 0.
    """
    text = parameters.get(key, "") or str(default)
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses NaN
        raise ConfigError(f"parameter {key} must be a number of {unit} >= 0, got '{text}'")
    return value


def config_json(config: mc.ModelConfig) -> str:
    """The config JSON string handed to backends (Triton's ``args['model_config']``)."""
    return json.dumps(to_json_dict(config))
