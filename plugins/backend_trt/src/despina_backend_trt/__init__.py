"""Despina's TensorRT backend: serves ``model.plan`` engines as Triton's tensorrt backend."""
