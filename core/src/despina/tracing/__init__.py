"""Request tracing as Triton's: trace mode ``triton`` (JSON trace files) and mode
``opentelemetry`` (spans exported over OTLP/HTTP).

:class:`~despina.tracing.tracer.Tracer` decides which requests are traced (the trace
settings of the request's model); a traced request carries a
:class:`~despina.tracing.trace.Trace` that records Triton's timestamps where the core and
the frontends already take them, and hands itself, once complete, to the mode's sink.
With tracing off nothing is recorded: a request carries ``trace=None``. (Nothing is
imported here, so the flags module can read :mod:`despina.tracing.config` cheaply.)
"""
