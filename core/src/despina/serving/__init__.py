"""Serving: the Server, the data plane frontends call, the command line and its settings, runtime settings, restricted APIs and the event loop."""
