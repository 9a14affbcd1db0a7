"""Despina: a Triton-compatible model inference server in Python, built on pluggy.

This module is the public API: plugins import from ``despina`` only (``from despina import
Backend, hookimpl``), never from its submodules, which may change. A test fails on any
plugin that does. Names load lazily on first use, so importing a plugin's entry module
stays cheap (``despina plugins`` and ``--help`` never import numpy or protobuf for it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Public name -> the module defining it; the names in :data:`_MODULES` export the module.
_EXPORTS: dict[str, str] = {
    # the plugin contract
    "hookimpl": "despina.hookspecs",
    "BackendHost": "despina.ports",
    "FrontendHost": "despina.ports",
    "MetricsHost": "despina.ports",
    # errors, one per status
    "errors": "despina.errors",
    "AlreadyExists": "despina.errors",
    "Cancelled": "despina.errors",
    "ConfigError": "despina.errors",
    "DeadlineExceeded": "despina.errors",
    "DespinaError": "despina.errors",
    "Internal": "despina.errors",
    "InvalidArgument": "despina.errors",
    "NotFound": "despina.errors",
    "PermissionDenied": "despina.errors",
    "Unavailable": "despina.errors",
    "Unknown": "despina.errors",
    "Unsupported": "despina.errors",
    # backends
    "Backend": "despina.backend",
    "CONCURRENT_EXECUTIONS": "despina.backend",
    "InstanceSpec": "despina.backend",
    "ModelContext": "despina.backend",
    "ModelInstance": "despina.backend",
    "ThreadedInstance": "despina.threaded",
    "CallPlacement": "despina.placement",
    "NeedsThread": "despina.placement",
    "inline_budget": "despina.placement",
    "running_inline": "despina.placement",
    "cpu_instances": "despina.placement",
    "cores": "despina.placement",
    "DisconnectWatch": "despina.transport.disconnect",
    "Trace": "despina.tracing.trace",
    "ascii_digits": "despina.digits",
    "threads_per_instance": "despina.placement",
    "instance_specs": "despina.instance_groups",
    "Gpu": "despina.devices",
    "GpuInventory": "despina.devices",
    "ModelVersion": "despina.model_versions",
    "RaggedBatch": "despina.ragged",
    "batch_sizes": "despina.batching",
    "TensorSpec": "despina.signatures",
    "check_config": "despina.signatures",
    "complete_config": "despina.signatures",
    # requests, responses and tensors
    "InferenceRequest": "despina.inference",
    "InferenceResponse": "despina.inference",
    "RequestedOutput": "despina.inference",
    "ResponseStream": "despina.inference",
    "SequenceFlags": "despina.inference",
    "ModelSignature": "despina.validation",
    "validate_request": "despina.validation",
    "repeated_tensor": "despina.validation",
    "DATATYPE_TO_DTYPE": "despina.tensors",
    "config_to_datatype": "despina.tensors",
    "datatype_of": "despina.tensors",
    "deserialize_bytes": "despina.tensors",
    "element_count": "despina.tensors",
    "checked_element_count": "despina.tensors",
    "MAX_TENSOR_BYTES": "despina.tensors",
    "serialize_bytes": "despina.tensors",
    "DeviceArray": "despina.device_arrays",
    "is_on_device": "despina.device_arrays",
    "to_host": "despina.device_arrays",
    "INTERNAL_KEY_PREFIX": "despina.own_shm",
    "claim_shm": "despina.own_shm",
    "private_shm_dir": "despina.own_shm",
    "SharedMemoryRegistry": "despina.shared_memory",
    # model configuration
    "ModelConfig": "despina.config",
    "mc": "despina.config",
    "config_json": "despina.config",
    "number_parameter": "despina.config",
    "parameters_of": "despina.config",
    "to_json_dict": "despina.config",
    "safe_join": "despina.paths",
    "check_model_name": "despina.paths",
    # metrics and statistics
    "COUNTER": "despina.custom_metrics",
    "GAUGE": "despina.custom_metrics",
    "HISTOGRAM": "despina.custom_metrics",
    "CustomMetrics": "despina.custom_metrics",
    "Metric": "despina.custom_metrics",
    "MetricFamily": "despina.custom_metrics",
    "FAILURE_REASONS": "despina.stats",
    "LATENCY_OBSERVERS": "despina.stats",
    "LatencyObserver": "despina.stats",
    "LatencyObservers": "despina.stats",
    "report_compute": "despina.stats",
    # settings
    "CORE": "despina.settings",
    "CoreSettings": "despina.settings",
    "Stash": "despina.settings",
    "StashKey": "despina.settings",
    # frontends
    "BodyBudget": "despina.request_bodies",
    "BodyBudgetExhausted": "despina.request_bodies",
    "BodyCharge": "despina.request_bodies",
    "BodyOverBudget": "despina.request_bodies",
    "BodyTooLarge": "despina.request_bodies",
    "BodyUndecodable": "despina.request_bodies",
    "Inflation": "despina.request_bodies",
    "inflate": "despina.request_bodies",
    "Restriction": "despina.restricted",
    "parse_restricted": "despina.restricted",
    "Listener": "despina.transport.listen",
    "listen": "despina.transport.listen",
    "stop_listening": "despina.transport.listen",
    "Roster": "despina.transport.roster",
    "triton_bool": "despina.triton_flags",
    # embedding a server
    "Server": "despina.server",
    "StartupError": "despina.server",
}

#: Public names that are modules themselves.
_MODULES = frozenset({"errors"})

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'despina' has no attribute '{name}'")
    module = importlib.import_module(module_name)
    value = module if name in _MODULES else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # the same names, for type checkers (a test keeps both lists equal)
    from despina import errors as errors
    from despina.backend import (
        CONCURRENT_EXECUTIONS as CONCURRENT_EXECUTIONS,
        Backend as Backend,
        InstanceSpec as InstanceSpec,
        ModelContext as ModelContext,
        ModelInstance as ModelInstance,
    )
    from despina.batching import batch_sizes as batch_sizes
    from despina.config import (
        ModelConfig as ModelConfig,
        config_json as config_json,
        mc as mc,
        number_parameter as number_parameter,
        parameters_of as parameters_of,
        to_json_dict as to_json_dict,
    )
    from despina.custom_metrics import (
        COUNTER as COUNTER,
        GAUGE as GAUGE,
        HISTOGRAM as HISTOGRAM,
        CustomMetrics as CustomMetrics,
        Metric as Metric,
        MetricFamily as MetricFamily,
    )
    from despina.device_arrays import (
        DeviceArray as DeviceArray,
        is_on_device as is_on_device,
        to_host as to_host,
    )
    from despina.devices import Gpu as Gpu, GpuInventory as GpuInventory
    from despina.digits import ascii_digits as ascii_digits
    from despina.errors import (
        AlreadyExists as AlreadyExists,
        Cancelled as Cancelled,
        ConfigError as ConfigError,
        DeadlineExceeded as DeadlineExceeded,
        DespinaError as DespinaError,
        Internal as Internal,
        InvalidArgument as InvalidArgument,
        NotFound as NotFound,
        PermissionDenied as PermissionDenied,
        Unavailable as Unavailable,
        Unknown as Unknown,
        Unsupported as Unsupported,
    )
    from despina.hookspecs import hookimpl as hookimpl
    from despina.inference import (
        InferenceRequest as InferenceRequest,
        InferenceResponse as InferenceResponse,
        RequestedOutput as RequestedOutput,
        ResponseStream as ResponseStream,
        SequenceFlags as SequenceFlags,
    )
    from despina.instance_groups import instance_specs as instance_specs
    from despina.model_versions import ModelVersion as ModelVersion
    from despina.own_shm import (
        INTERNAL_KEY_PREFIX as INTERNAL_KEY_PREFIX,
        claim_shm as claim_shm,
        private_shm_dir as private_shm_dir,
    )
    from despina.paths import check_model_name as check_model_name, safe_join as safe_join
    from despina.placement import (
        CallPlacement as CallPlacement,
        NeedsThread as NeedsThread,
        cores as cores,
        cpu_instances as cpu_instances,
        inline_budget as inline_budget,
        running_inline as running_inline,
        threads_per_instance as threads_per_instance,
    )
    from despina.ports import (
        BackendHost as BackendHost,
        FrontendHost as FrontendHost,
        MetricsHost as MetricsHost,
    )
    from despina.ragged import RaggedBatch as RaggedBatch
    from despina.request_bodies import (
        BodyBudget as BodyBudget,
        BodyBudgetExhausted as BodyBudgetExhausted,
        BodyCharge as BodyCharge,
        BodyOverBudget as BodyOverBudget,
        BodyTooLarge as BodyTooLarge,
        BodyUndecodable as BodyUndecodable,
        Inflation as Inflation,
        inflate as inflate,
    )
    from despina.restricted import Restriction as Restriction, parse_restricted as parse_restricted
    from despina.server import Server as Server, StartupError as StartupError
    from despina.settings import (
        CORE as CORE,
        CoreSettings as CoreSettings,
        Stash as Stash,
        StashKey as StashKey,
    )
    from despina.shared_memory import SharedMemoryRegistry as SharedMemoryRegistry
    from despina.signatures import (
        TensorSpec as TensorSpec,
        check_config as check_config,
        complete_config as complete_config,
    )
    from despina.stats import (
        FAILURE_REASONS as FAILURE_REASONS,
        LATENCY_OBSERVERS as LATENCY_OBSERVERS,
        LatencyObserver as LatencyObserver,
        LatencyObservers as LatencyObservers,
        report_compute as report_compute,
    )
    from despina.tensors import (
        DATATYPE_TO_DTYPE as DATATYPE_TO_DTYPE,
        MAX_TENSOR_BYTES as MAX_TENSOR_BYTES,
        checked_element_count as checked_element_count,
        config_to_datatype as config_to_datatype,
        datatype_of as datatype_of,
        deserialize_bytes as deserialize_bytes,
        element_count as element_count,
        serialize_bytes as serialize_bytes,
    )
    from despina.threaded import ThreadedInstance as ThreadedInstance
    from despina.tracing.trace import Trace as Trace
    from despina.transport.disconnect import DisconnectWatch as DisconnectWatch
    from despina.transport.listen import (
        Listener as Listener,
        listen as listen,
        stop_listening as stop_listening,
    )
    from despina.transport.roster import Roster as Roster
    from despina.triton_flags import triton_bool as triton_bool
    from despina.validation import (
        ModelSignature as ModelSignature,
        repeated_tensor as repeated_tensor,
        validate_request as validate_request,
    )
