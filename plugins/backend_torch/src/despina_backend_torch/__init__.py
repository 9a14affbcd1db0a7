"""Despina's PyTorch backend: TorchScript ``model.pt`` as Triton's pytorch_libtorch platform,
plus PyTorch 2 models (``torch.export`` programs in ``model.pt2``, ``model.py`` modules)."""
