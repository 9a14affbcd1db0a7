"""DimsPattern: config dims (-1: any size) against request shapes, as Triton matches them."""

from __future__ import annotations

import itertools

import pytest
from despina.inference.validation import DimsPattern

DIMS = [(), (4,), (-1,), (1,), (-1, 16), (2, -1, 3), (-1, -1), (5, 6)]
SHAPES = [(), (1,), (4,), (0,), (16,), (7, 16), (7, 15), (2, 9, 3), (2, 9, 4), (3, 3), (5, 6)]


def reference(shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    """The rule written out: equal ranks with every fixed dim equal, or a [1] tensor for
    a scalar-shaped config."""
    if not dims and shape == (1,):
        return True
    return len(shape) == len(dims) and all(d in (-1, s) for s, d in zip(shape, dims, strict=True))


@pytest.mark.parametrize("dims", DIMS, ids=str)
def test_matches_as_the_rule_says(dims: tuple[int, ...]) -> None:
    pattern = DimsPattern(dims)
    assert pattern.dims == dims
    for shape in SHAPES:
        assert pattern.matches(shape) is reference(shape, dims), shape


def test_every_fixed_position_is_compared() -> None:
    pattern = DimsPattern((2, -1, 3, -1, 5))
    for shape in itertools.product((2, 9), (1,), (3, 9), (1,), (5, 9)):
        assert pattern.matches(shape) is (shape[0] == 2 and shape[2] == 3 and shape[4] == 5)
