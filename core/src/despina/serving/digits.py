"""Telling a decimal number written in ASCII digits, the only kind any protocol, flag or
folder name of Despina's means.

``str.isdigit`` is not that test: it accepts ``"³"``, which ``int`` refuses (a client's
model version ``"³"`` once answered INTERNAL), and ``"٣"``, which ``int`` reads as 3.
"""

from __future__ import annotations


def ascii_digits(text: str) -> bool:
    """True when ``text`` is one or more of the characters ``0``-``9`` and nothing else."""
    return text.isascii() and text.isdigit()
