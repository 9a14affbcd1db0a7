"""Despina's gRPC frontend: Triton's ``inference.GRPCInferenceService`` served by
Despina's own HTTP/2 server."""
