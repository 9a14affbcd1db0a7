"""Triton's calling convention for ``model.py``, wherever the model runs (the server in
``in-process`` mode, its own process otherwise): importing it, ``initialize``'s
arguments, checking what ``execute`` returned."""
