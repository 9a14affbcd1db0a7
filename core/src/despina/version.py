"""Despina's version (the distribution's, kept in one place)."""

__version__ = "0.1.0"
