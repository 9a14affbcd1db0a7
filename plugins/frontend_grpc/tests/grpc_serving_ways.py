"""The ways of serving gRPC every behaviour is checked under: Despina's own HTTP/2 server,
grpc.aio in the server process, and grpc.aio in two worker processes."""

WAYS = ("--grpc-stack=despina", "--grpc-stack=grpcio", "--grpc-worker-processes=2")
WAY_IDS = ("despina-http2", "grpcio", "2-workers")
