"""Triton's protobuf schemas as message classes, without tritonclient's gRPC client.

``model_config`` (``model_config.proto``: ``inference.ModelConfig`` and the rest of the
config schema) and ``grpc_service`` (``grpc_service.proto``: the KServe v2 / Triton gRPC
messages and the ``inference.GRPCInferenceService`` descriptor) hold what tritonclient's
generated ``model_config_pb2`` / ``service_pb2`` hold: every message class, every top-level
enum (a wrapper with ``Name``/``Value``) and its values, and ``DESCRIPTOR``.

They are built from the serialized file descriptors in tritonclient's generated modules,
read as data: importing ``tritonclient.grpc.*`` would run that package's ``__init__``,
which loads grpcio's C core (~9 MiB resident) that the server never uses. The classes are
protobuf's own for those descriptors, so they are the very classes tritonclient's modules
give when a process imports both (tests, clients in the same process).
"""
