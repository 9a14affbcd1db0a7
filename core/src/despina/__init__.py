"""Despina: a Triton-compatible model inference server in Python, built on pluggy.

This module is the public API: plugins import from ``despina`` only (``from despina import
Backend, hookimpl``), never from its submodules, which may change. A test fails on any
plugin that does. Names load lazily on first use, so importing a plugin's entry module
stays cheap (``despina plugins`` and ``--help`` never import numpy or protobuf for it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from despina.version import __version__

#: Public name -> the module defining it; the names in :data:`_MODULES` export the module.
_EXPORTS: dict[str, str] = {
    # the plugin contract
    "hookimpl": "despina.plugin.hookspecs",
    "BackendHost": "despina.plugin.ports",
    "FrontendHost": "despina.plugin.ports",
    "MetricsHost": "despina.plugin.ports",
    "ResponseCache": "despina.plugin.ports",
    "ServingProcessesPart": "despina.plugin.ports",
    "SharedPort": "despina.serving.serving_processes",
    "refuse_unshared_port": "despina.serving.serving_processes",
    "CachedResponse": "despina.inference.response_cache",
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
    "Backend": "despina.plugin.backend",
    "CONCURRENT_EXECUTIONS": "despina.plugin.backend",
    "InstanceSpec": "despina.plugin.backend",
    "ModelContext": "despina.plugin.backend",
    "ModelInstance": "despina.plugin.backend",
    "ThreadedInstance": "despina.plugin.threaded_instance",
    "CallPlacement": "despina.models.call_placement",
    "NeedsThread": "despina.models.call_placement",
    "inline_budget": "despina.models.call_placement",
    "running_inline": "despina.models.call_placement",
    "cpu_instances": "despina.models.call_placement",
    "cores": "despina.models.call_placement",
    "DisconnectWatch": "despina.transport.disconnect",
    "Trace": "despina.tracing.trace",
    "ascii_digits": "despina.serving.digits",
    "threads_per_instance": "despina.models.call_placement",
    "instance_specs": "despina.repository.instance_groups",
    "Gpu": "despina.memory.gpus",
    "GpuInventory": "despina.memory.gpus",
    "ModelVersion": "despina.models.versions",
    "RaggedBatch": "despina.inference.ragged",
    "batch_sizes": "despina.inference.batching",
    "TensorSpec": "despina.repository.signatures",
    "check_config": "despina.repository.signatures",
    "complete_config": "despina.repository.signatures",
    # requests, responses and tensors
    "InferenceRequest": "despina.inference.request",
    "InferenceResponse": "despina.inference.request",
    "RequestedOutput": "despina.inference.request",
    "ResponseStream": "despina.inference.request",
    "SequenceFlags": "despina.inference.request",
    "ModelSignature": "despina.inference.validation",
    "validate_request": "despina.inference.validation",
    "repeated_tensor": "despina.inference.validation",
    "check_forwarded_header": "despina.inference.reserved_parameters",
    "header_forward_matcher": "despina.inference.reserved_parameters",
    "DATATYPES": "despina.inference.tensors",
    "config_to_datatype": "despina.inference.tensors",
    "datatype_of": "despina.inference.tensors",
    "dtype_of": "despina.inference.tensors",
    "find_dtype": "despina.inference.tensors",
    "deserialize_bytes": "despina.inference.tensors",
    "element_count": "despina.inference.tensors",
    "checked_element_count": "despina.inference.tensors",
    "MAX_TENSOR_BYTES": "despina.inference.tensors",
    "serialize_bytes": "despina.inference.tensors",
    "DeviceArray": "despina.memory.device_arrays",
    "is_on_device": "despina.memory.device_arrays",
    "to_host": "despina.memory.device_arrays",
    "INTERNAL_KEY_PREFIX": "despina.memory.own_shm",
    "claim_shm": "despina.memory.own_shm",
    "private_shm_dir": "despina.memory.own_shm",
    "SharedMemoryRegistry": "despina.memory.shared_memory",
    # model configuration
    "ModelConfig": "despina.repository.config",
    "mc": "despina.repository.config",
    "grpc_service": "despina.triton_proto.grpc_service",
    "config_json": "despina.repository.config",
    "number_parameter": "despina.repository.config",
    "parameters_of": "despina.repository.config",
    "to_json_dict": "despina.repository.config",
    "safe_join": "despina.repository.paths",
    "check_model_name": "despina.repository.paths",
    # metrics and statistics
    "COUNTER": "despina.serving.custom_metrics",
    "GAUGE": "despina.serving.custom_metrics",
    "HISTOGRAM": "despina.serving.custom_metrics",
    "CustomMetrics": "despina.serving.custom_metrics",
    "Metric": "despina.serving.custom_metrics",
    "MetricFamily": "despina.serving.custom_metrics",
    "FAILURE_REASONS": "despina.inference.stats",
    "LATENCY_OBSERVERS": "despina.inference.stats",
    "LatencyObserver": "despina.inference.stats",
    "LatencyObservers": "despina.inference.stats",
    "report_compute": "despina.inference.stats",
    # settings
    "CORE": "despina.serving.settings",
    "CoreSettings": "despina.serving.settings",
    "Stash": "despina.serving.settings",
    "StashKey": "despina.serving.settings",
    # frontends
    "BodyBudget": "despina.inference.request_bodies",
    "BodyBudgetExhausted": "despina.inference.request_bodies",
    "BodyCharge": "despina.inference.request_bodies",
    "BodyOverBudget": "despina.inference.request_bodies",
    "BodyTooLarge": "despina.inference.request_bodies",
    "BodyUndecodable": "despina.inference.request_bodies",
    "Inflation": "despina.inference.request_bodies",
    "inflate": "despina.inference.request_bodies",
    "Restriction": "despina.serving.restricted",
    "parse_restricted": "despina.serving.restricted",
    "AddressInUse": "despina.transport.listen",
    "Listener": "despina.transport.listen",
    "listen": "despina.transport.listen",
    "stop_listening": "despina.transport.listen",
    "Roster": "despina.transport.roster",
    "triton_bool": "despina.serving.triton_flags",
    # embedding a server
    "Server": "despina.serving.server",
    "StartupError": "despina.serving.server",
}

#: Public names that are modules themselves.
_MODULES = frozenset({"errors", "grpc_service"})

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
    from despina.inference.batching import batch_sizes as batch_sizes
    from despina.inference.ragged import RaggedBatch as RaggedBatch
    from despina.inference.request import (
        InferenceRequest as InferenceRequest,
        InferenceResponse as InferenceResponse,
        RequestedOutput as RequestedOutput,
        ResponseStream as ResponseStream,
        SequenceFlags as SequenceFlags,
    )
    from despina.inference.request_bodies import (
        BodyBudget as BodyBudget,
        BodyBudgetExhausted as BodyBudgetExhausted,
        BodyCharge as BodyCharge,
        BodyOverBudget as BodyOverBudget,
        BodyTooLarge as BodyTooLarge,
        BodyUndecodable as BodyUndecodable,
        Inflation as Inflation,
        inflate as inflate,
    )
    from despina.inference.reserved_parameters import (
        check_forwarded_header as check_forwarded_header,
        header_forward_matcher as header_forward_matcher,
    )
    from despina.inference.response_cache import CachedResponse as CachedResponse
    from despina.inference.stats import (
        FAILURE_REASONS as FAILURE_REASONS,
        LATENCY_OBSERVERS as LATENCY_OBSERVERS,
        LatencyObserver as LatencyObserver,
        LatencyObservers as LatencyObservers,
        report_compute as report_compute,
    )
    from despina.inference.tensors import (
        DATATYPES as DATATYPES,
        MAX_TENSOR_BYTES as MAX_TENSOR_BYTES,
        checked_element_count as checked_element_count,
        config_to_datatype as config_to_datatype,
        datatype_of as datatype_of,
        deserialize_bytes as deserialize_bytes,
        dtype_of as dtype_of,
        element_count as element_count,
        find_dtype as find_dtype,
        serialize_bytes as serialize_bytes,
    )
    from despina.inference.validation import (
        ModelSignature as ModelSignature,
        repeated_tensor as repeated_tensor,
        validate_request as validate_request,
    )
    from despina.memory.device_arrays import (
        DeviceArray as DeviceArray,
        is_on_device as is_on_device,
        to_host as to_host,
    )
    from despina.memory.gpus import Gpu as Gpu, GpuInventory as GpuInventory
    from despina.memory.own_shm import (
        INTERNAL_KEY_PREFIX as INTERNAL_KEY_PREFIX,
        claim_shm as claim_shm,
        private_shm_dir as private_shm_dir,
    )
    from despina.memory.shared_memory import SharedMemoryRegistry as SharedMemoryRegistry
    from despina.models.call_placement import (
        CallPlacement as CallPlacement,
        NeedsThread as NeedsThread,
        cores as cores,
        cpu_instances as cpu_instances,
        inline_budget as inline_budget,
        running_inline as running_inline,
        threads_per_instance as threads_per_instance,
    )
    from despina.models.versions import ModelVersion as ModelVersion
    from despina.plugin.backend import (
        CONCURRENT_EXECUTIONS as CONCURRENT_EXECUTIONS,
        Backend as Backend,
        InstanceSpec as InstanceSpec,
        ModelContext as ModelContext,
        ModelInstance as ModelInstance,
    )
    from despina.plugin.hookspecs import hookimpl as hookimpl
    from despina.plugin.ports import (
        BackendHost as BackendHost,
        FrontendHost as FrontendHost,
        MetricsHost as MetricsHost,
        ResponseCache as ResponseCache,
        ServingProcessesPart as ServingProcessesPart,
    )
    from despina.plugin.threaded_instance import ThreadedInstance as ThreadedInstance
    from despina.repository.config import (
        ModelConfig as ModelConfig,
        config_json as config_json,
        mc as mc,
        number_parameter as number_parameter,
        parameters_of as parameters_of,
        to_json_dict as to_json_dict,
    )
    from despina.repository.instance_groups import instance_specs as instance_specs
    from despina.repository.paths import (
        check_model_name as check_model_name,
        safe_join as safe_join,
    )
    from despina.repository.signatures import (
        TensorSpec as TensorSpec,
        check_config as check_config,
        complete_config as complete_config,
    )
    from despina.serving.custom_metrics import (
        COUNTER as COUNTER,
        GAUGE as GAUGE,
        HISTOGRAM as HISTOGRAM,
        CustomMetrics as CustomMetrics,
        Metric as Metric,
        MetricFamily as MetricFamily,
    )
    from despina.serving.digits import ascii_digits as ascii_digits
    from despina.serving.restricted import (
        Restriction as Restriction,
        parse_restricted as parse_restricted,
    )
    from despina.serving.server import Server as Server, StartupError as StartupError
    from despina.serving.serving_processes import (
        SharedPort as SharedPort,
        refuse_unshared_port as refuse_unshared_port,
    )
    from despina.serving.settings import (
        CORE as CORE,
        CoreSettings as CoreSettings,
        Stash as Stash,
        StashKey as StashKey,
    )
    from despina.serving.triton_flags import triton_bool as triton_bool
    from despina.tracing.trace import Trace as Trace
    from despina.transport.disconnect import DisconnectWatch as DisconnectWatch
    from despina.transport.listen import (
        AddressInUse as AddressInUse,
        Listener as Listener,
        listen as listen,
        stop_listening as stop_listening,
    )
    from despina.transport.roster import Roster as Roster
    from despina.triton_proto import grpc_service as grpc_service
