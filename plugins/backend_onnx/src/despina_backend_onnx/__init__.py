"""Despina's ONNX Runtime backend: serves ``model.onnx`` as Triton's onnxruntime backend does."""
