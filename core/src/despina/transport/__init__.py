"""The transport toolkit frontends share: listening sockets (``listen``), the frame codec
(``frames``) and the worker-process pool (``workers``); protocol engines without I/O are
still to move here (see DESIGN.md)."""
