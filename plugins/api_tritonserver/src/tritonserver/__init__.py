"""Triton's in-process Python API (``tritonserver``), implemented over Despina's Server.

Provided by the ``despina-tritonserver-api`` distribution, not by NVIDIA's ``tritonserver``
wheel: ``__despina__`` is True here, ``__version__`` ends in ``+despina.<version>``. The
names below are the public API, as in Triton; modules starting with ``_`` are private.
"""

from tritonserver._enums import (
    DataType as DataType,
    DLDeviceType as DLDeviceType,
    InstanceGroupKind as InstanceGroupKind,
    LogFormat as LogFormat,
    LogLevel as LogLevel,
    MemoryType as MemoryType,
    MetricFormat as MetricFormat,
    MetricKind as MetricKind,
    ModelBatchFlag as ModelBatchFlag,
    ModelControlMode as ModelControlMode,
    ModelTxnPropertyFlag as ModelTxnPropertyFlag,
    RateLimitMode as RateLimitMode,
)
from tritonserver._errors import (
    ERRORS,
    AlreadyExistsError as AlreadyExistsError,
    InternalError as InternalError,
    InvalidArgumentError as InvalidArgumentError,
    NotFoundError as NotFoundError,
    TritonError as TritonError,
    UnavailableError as UnavailableError,
    UnknownError as UnknownError,
    UnsupportedError as UnsupportedError,
)
from tritonserver._model import Model as Model
from tritonserver._options import (
    ModelLoadDeviceLimit as ModelLoadDeviceLimit,
    Options as Options,
    RateLimiterResource as RateLimiterResource,
)
from tritonserver._provenance import version, warn_if_shadowing
from tritonserver._request import InferenceRequest as InferenceRequest
from tritonserver._response import InferenceResponse as InferenceResponse
from tritonserver._server import Server as Server
from tritonserver._tensor import MemoryBuffer as MemoryBuffer, Tensor as Tensor

for _error in ERRORS:
    _error.__module__ = "tritonserver"

#: True: this is Despina's implementation of the API, not NVIDIA's C binding.
__despina__ = True
__version__ = version()
__all__: list[str] = []

warn_if_shadowing("tritonserver")
