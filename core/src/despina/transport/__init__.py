"""The transport toolkit frontends share: listening sockets (more to move here: one frame
codec, one worker pool, protocol engines without I/O; see DESIGN.md)."""
