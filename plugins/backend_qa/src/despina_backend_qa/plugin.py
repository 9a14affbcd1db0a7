"""Entry-point module: registers the four test backends."""

from __future__ import annotations

from despina import Backend, hookimpl

from despina_backend_qa.identity import IdentityBackend
from despina_backend_qa.repeat import RepeatBackend
from despina_backend_qa.sequence import SequenceBackend
from despina_backend_qa.square import SquareBackend


@hookimpl
def despina_backends() -> list[type[Backend]]:
    return [IdentityBackend, RepeatBackend, SquareBackend, SequenceBackend]
