"""Despina's OpenVINO backend: serves ``model.xml`` IR (and ``model.onnx`` with
``default_model_filename``) as Triton's openvino backend does."""
