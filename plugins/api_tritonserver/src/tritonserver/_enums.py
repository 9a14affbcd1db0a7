"""Triton's enumerations, with the C API's member names and values."""

from __future__ import annotations

from enum import IntEnum


class DataType(IntEnum):
    INVALID = 0
    BOOL = 1
    UINT8 = 2
    UINT16 = 3
    UINT32 = 4
    UINT64 = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FP16 = 10
    FP32 = 11
    FP64 = 12
    BYTES = 13
    BF16 = 14


class MemoryType(IntEnum):
    CPU = 0
    CPU_PINNED = 1
    GPU = 2


class DLDeviceType(IntEnum):
    """DLPack's device types (the ones Triton's API names)."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16


class ModelControlMode(IntEnum):
    NONE = 0
    POLL = 1
    EXPLICIT = 2


class RateLimitMode(IntEnum):
    OFF = 0
    EXEC_COUNT = 1


class LogFormat(IntEnum):
    DEFAULT = 0
    ISO8601 = 1


class LogLevel(IntEnum):
    INFO = 0
    WARN = 1
    ERROR = 2
    VERBOSE = 3


class InstanceGroupKind(IntEnum):
    AUTO = 0
    CPU = 1
    GPU = 2
    MODEL = 3


class MetricFormat(IntEnum):
    PROMETHEUS = 0


class MetricKind(IntEnum):
    COUNTER = 0
    GAUGE = 1


class ModelBatchFlag(IntEnum):
    UNKNOWN = 1
    FIRST_DIM = 2


class ModelTxnPropertyFlag(IntEnum):
    ONE_TO_ONE = 1
    DECOUPLED = 2
