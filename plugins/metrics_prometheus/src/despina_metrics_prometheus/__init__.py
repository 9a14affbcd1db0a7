"""Despina's Prometheus metrics exporter (Triton's metric names and labels)."""
