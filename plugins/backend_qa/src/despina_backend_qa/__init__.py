"""Test backends with the names and behaviour of Triton's C++ test backends (identity,
repeat, square, sequence), so that Triton's QA model repositories load unchanged."""
