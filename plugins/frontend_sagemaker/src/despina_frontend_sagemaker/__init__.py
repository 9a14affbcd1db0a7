"""Despina's SageMaker frontend: tritonserver's ``--allow-sagemaker`` endpoints (``/ping``,
``/invocations``, the multi-model ``/models`` routes) on a port of their own, and
``despina-sagemaker-serve``, the container's ``serve`` command."""
