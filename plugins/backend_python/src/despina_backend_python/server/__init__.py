"""What runs in the Despina server: the ``python`` backend, its two execution modes
(``process``, ``in-process``), the handle on a model's child process, execution
environments, auto-complete, and the server as host of model code (BLS, logs, metrics)."""
