"""Builtin schedulers: default (one request per execution) and the dynamic batcher."""
