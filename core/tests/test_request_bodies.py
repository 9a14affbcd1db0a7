"""The request-body budget and the shared inflater (despina.inference.request_bodies)."""

from __future__ import annotations

import threading
import zlib

import pytest
from despina import (
    BodyBudget,
    BodyBudgetExhausted,
    BodyOverBudget,
    BodyTooLarge,
    BodyUndecodable,
    Inflation,
    inflate,
)
from despina.inference.request_bodies import INFLATE_STEP, available_memory, default_budget


def compressed(data: bytes, wbits: int) -> bytes:
    deflater = zlib.compressobj(6, wbits=wbits)
    return deflater.compress(data) + deflater.flush()


def test_charges_count_until_released_and_refuse_past_the_budget() -> None:
    budget = BodyBudget(100)
    first, second = budget.charge(), budget.charge()
    first.add(60)
    with pytest.raises(BodyBudgetExhausted) as busy:
        second.add(50)  # fits the budget alone: others hold the rest
    assert type(busy.value) is BodyBudgetExhausted
    assert busy.value.http_status == 503 and busy.value.grpc_code == "RESOURCE_EXHAUSTED"
    assert "retry later" in str(busy.value)
    with pytest.raises(BodyOverBudget) as alone:
        second.add(101)  # more than the whole budget: no retry helps
    assert alone.value.http_status == 413
    assert (budget.held, second.size) == (60, 0)  # a refused add adds nothing
    first.give_back(10)
    second.add(50)
    assert budget.held == 100
    first.release()
    first.release()  # idempotent
    first.add(10)  # a released charge counts nothing more
    assert (budget.held, first.size) == (50, 0)
    second.release()
    assert budget.held == 0


def test_no_budget_counts_nothing() -> None:
    budget = BodyBudget(0)
    charge = budget.charge()
    charge.add(1 << 40)
    charge.release()
    assert (budget.held, charge.size) == (0, 0)


def test_charges_from_threads_add_up() -> None:
    budget = BodyBudget(1 << 40)
    charges = [budget.charge() for _ in range(4)]

    def work(index: int) -> None:
        for _ in range(10_000):
            charges[index].add(3)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert budget.held == 4 * 30_000
    for charge in charges:
        charge.release()
    assert budget.held == 0


def test_default_budget_is_half_the_memory_available() -> None:
    assert 0 < default_budget() == int(available_memory() * 0.5)


@pytest.mark.parametrize(("encoding", "wbits"), [("gzip", 31), ("deflate", 15), ("deflate", -15)])
def test_inflation_steps_and_charges(encoding: str, wbits: int) -> None:
    data = bytes(range(256)) * (3 * INFLATE_STEP // 256 + 7)
    body = compressed(data, wbits)
    budget = BodyBudget(1 << 30)
    charge = budget.charge()
    inflation = Inflation(body, encoding, len(data), charge)
    steps = 1
    while not inflation.advance(0):
        steps += 1
    assert inflation.result() == data
    assert steps > 3
    assert charge.size == len(data) == budget.held
    assert inflate(b"", encoding, 10, charge) == b""


def test_a_gzip_trailer_over_the_limit_is_refused_before_inflating() -> None:
    body = compressed(bytes(64 << 20), 31)
    charge = BodyBudget(1 << 30).charge()
    with pytest.raises(BodyTooLarge):
        Inflation(body, "gzip", 1 << 20, charge)
    assert charge.size == 0
    # a trailer that lies is found out by inflating: refused one step past the limit
    with pytest.raises(BodyTooLarge):
        inflate(body[:-4] + bytes(4), "gzip", 1 << 20, charge)
    assert charge.size <= (1 << 20) + INFLATE_STEP


def test_inflating_past_the_budget_stops_there() -> None:
    budget = BodyBudget(4 * INFLATE_STEP)
    charge = budget.charge()
    with pytest.raises(BodyOverBudget):
        inflate(compressed(bytes(64 << 20), 31), "gzip", 1 << 30, charge)
    assert charge.size <= 4 * INFLATE_STEP


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_invalid_and_truncated_data_is_undecodable(encoding: str) -> None:
    charge = BodyBudget(0).charge()
    body = compressed(b"x" * 100_000, 31 if encoding == "gzip" else 15)
    limit = 1 << 32  # no trailer announces more: a cut one ends in other bytes
    with pytest.raises(BodyUndecodable):
        inflate(body[: len(body) // 2], encoding, limit, charge)
    with pytest.raises(BodyUndecodable):
        inflate(b"\x1f\x8b not gzip at all", encoding, limit, charge)


def test_a_cancelled_inflation_stops() -> None:
    inflation = Inflation(compressed(bytes(16 << 20), 31), "gzip", 1 << 30, BodyBudget(0).charge())
    inflation.cancel()
    assert inflation.finish() is False
