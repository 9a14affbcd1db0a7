"""ONNX Runtime session options and execution providers from a model's config.

Read the way Triton's onnxruntime backend reads them:

- ``parameters``: ``intra_op_thread_count``, ``inter_op_thread_count``,
  ``execution_mode`` (0 sequential, 1 parallel), ``enable_mem_arena``,
  ``enable_mem_pattern``, ``memory.enable_memory_arena_shrinkage`` (run option),
  ``session.use_device_allocator_for_initializers``, and the deprecated CUDA keys
  ``cudnn_conv_algo_search``, ``gpu_mem_limit``, ``arena_extend_strategy``,
  ``do_copy_in_default_stream``.
- ``optimization.graph.level``: -1 basic, 1 extended, 2 none, otherwise all.
- ``optimization.execution_accelerators``: GPU ``tensorrt`` / ``cuda`` (with their
  parameters), CPU ``openvino``; each needs its provider in the installed onnxruntime.

Threads: each session has its own intra-op pool (Triton's behaviour), of
``intra_op_thread_count`` threads or onnxruntime's default (a thread per core); a model's
CPU instances share one session unless the count is stated (:mod:`.backend`). With
``--backend-config=onnxruntime,thread-pool=shared`` every session of the process runs on
one pool of a thread per core (:mod:`.threads`), so several models share the cores too;
the models' thread counts are then ignored (onnxruntime allows no per-session pool once
the shared one exists).

Every function imports onnxruntime lazily and raises ConfigError for a bad value.
"""

from __future__ import annotations

from typing import Any

from despina import ConfigError, ModelConfig, parameters_of

from despina_backend_onnx.threads import shared_pool

#: Triton's TensorRT accelerator keys whose EP option has another name.
_TRT_RENAMED = {"max_workspace_size_bytes": "trt_max_workspace_size"}
_TRT_PRECISIONS = {
    "FP32": {},
    "FP16": {"trt_fp16_enable": "True"},
    "INT8": {"trt_int8_enable": "True"},
}
_CUDA_PARAMETER_KEYS = (
    "cudnn_conv_algo_search",
    "gpu_mem_limit",
    "arena_extend_strategy",
    "do_copy_in_default_stream",
)
_GRAPH_LEVELS = {-1: "ORT_ENABLE_BASIC", 1: "ORT_ENABLE_EXTENDED", 2: "ORT_DISABLE_ALL"}

Provider = tuple[str, dict[str, str]]


def states_threads(config: ModelConfig) -> bool:
    """Whether the config states ``intra_op_thread_count`` (then each instance opens a
    session with that pool of its own)."""
    return bool(parameters_of(config).get("intra_op_thread_count", "").strip())


def session_options(config: ModelConfig, model: str, shared_threads: bool = False) -> Any:
    """An ``onnxruntime.SessionOptions`` for the model's ``parameters`` and graph level;
    ``shared_threads``: on the process-wide pool (:func:`.threads.shared_pool`)."""
    import onnxruntime as ort

    params = parameters_of(config)
    options = ort.SessionOptions()
    intra = _int(params, "intra_op_thread_count", 0, model)
    inter = _int(params, "inter_op_thread_count", 0, model)
    if shared_threads:
        shared_pool()
        options.use_per_session_threads = False
    else:
        options.intra_op_num_threads = intra
        options.inter_op_num_threads = inter
    mode = _int(params, "execution_mode", 0, model)
    options.execution_mode = (
        ort.ExecutionMode.ORT_PARALLEL if mode == 1 else ort.ExecutionMode.ORT_SEQUENTIAL
    )
    if "enable_mem_arena" in params:
        options.enable_cpu_mem_arena = _bool(params, "enable_mem_arena", model)
    if "enable_mem_pattern" in params:
        options.enable_mem_pattern = _bool(params, "enable_mem_pattern", model)
    key = "session.use_device_allocator_for_initializers"
    if key in params:
        options.add_session_config_entry(key, "1" if _bool(params, key, model) else "0")
    level = int(config.optimization.graph.level)
    options.graph_optimization_level = getattr(
        ort.GraphOptimizationLevel, _GRAPH_LEVELS.get(level, "ORT_ENABLE_ALL")
    )
    return options


def run_options(config: ModelConfig, model: str) -> Any:
    """``onnxruntime.RunOptions`` (arena shrinkage), or None when nothing is set."""
    import onnxruntime as ort

    value = parameters_of(config).get("memory.enable_memory_arena_shrinkage")
    if not value:
        return None
    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", value)
    return options


def providers(config: ModelConfig, kind: str, device_id: int, model: str) -> list[Provider]:
    """Execution providers, most preferred first, for an instance of ``kind``.

    Raises ConfigError for an unknown accelerator, and when a provider the config asks
    for is not in this onnxruntime build (naming the ones it has).
    """
    accelerators = config.optimization.execution_accelerators
    chosen: list[Provider] = []
    if kind == "KIND_GPU":
        cuda = {"device_id": str(device_id)}
        cuda.update({k: v for k, v in parameters_of(config).items() if k in _CUDA_PARAMETER_KEYS})
        for accelerator in accelerators.gpu_execution_accelerator:
            params = dict(accelerator.parameters)
            if accelerator.name == "tensorrt":
                chosen.append(("TensorrtExecutionProvider", _tensorrt(params, device_id, model)))
            elif accelerator.name == "cuda":
                cuda.update(params)
            else:
                raise ConfigError(
                    f"model '{model}': unknown GPU execution accelerator '{accelerator.name}' "
                    "(onnxruntime supports 'tensorrt' and 'cuda')"
                )
        chosen.append(("CUDAExecutionProvider", cuda))
    for accelerator in accelerators.cpu_execution_accelerator:
        if accelerator.name != "openvino":
            raise ConfigError(
                f"model '{model}': unknown CPU execution accelerator '{accelerator.name}' "
                "(onnxruntime supports 'openvino')"
            )
        chosen.append(("OpenVINOExecutionProvider", dict(accelerator.parameters)))
    chosen.append(("CPUExecutionProvider", {}))
    _require_available(chosen, model)
    return chosen


def _tensorrt(params: dict[str, str], device_id: int, model: str) -> dict[str, str]:
    options = {"device_id": str(device_id)}
    precision = params.pop("precision_mode", "FP32").upper()
    if precision not in _TRT_PRECISIONS:
        raise ConfigError(
            f"model '{model}': tensorrt precision_mode must be FP32, FP16 or INT8, got '{precision}'"
        )
    options.update(_TRT_PRECISIONS[precision])
    for key, value in params.items():
        name = _TRT_RENAMED.get(key, key if key.startswith("trt_") else f"trt_{key}")
        options[name] = value
    return options


def _require_available(chosen: list[Provider], model: str) -> None:
    import onnxruntime as ort

    available = ort.get_available_providers()
    for name, _ in chosen:
        if name not in available:
            raise ConfigError(
                f"model '{model}' needs onnxruntime's {name}, which the installed onnxruntime "
                f"lacks (available: {', '.join(available)})"
            )


def _int(params: dict[str, str], key: str, default: int, model: str) -> int:
    value = params.get(key, "")
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(
            f"model '{model}': parameter '{key}' must be an integer, got '{value}'"
        ) from None


def _bool(params: dict[str, str], key: str, model: str) -> bool:
    value = params[key].strip().lower()
    if value in ("1", "true", "on", "yes"):
        return True
    if value in ("0", "false", "off", "no"):
        return False
    raise ConfigError(
        f"model '{model}': parameter '{key}' must be 0/1 or true/false, got '{value}'"
    )
