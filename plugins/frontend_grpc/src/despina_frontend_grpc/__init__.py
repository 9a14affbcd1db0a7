"""Despina's gRPC frontend: Triton's ``inference.GRPCInferenceService`` on ``grpc.aio``."""
