"""``make fuzz``: the property tests of tests/fuzz/ as long campaigns.

Runs pytest on this folder with the "fuzz" hypothesis profile (random seeds, no example
database) until each target ran ``--examples`` cases, then prints per target the cases
run and the crashes, hangs and server errors (5xx / gRPC INTERNAL, UNKNOWN) met. Each
finding also fails its test, and hypothesis prints the shrunk example.

The cases run in rounds of ``--round`` cases per target, each a fresh pytest process
with fresh seeds and servers: hypothesis keeps a tree of every choice sequence it tried,
so one 100,000-case run grows by gigabytes (a campaign was OOM-killed at 16 GB). A round
that finds something ends the campaign (its output holds the example).

    python tests/fuzz/campaign.py --examples 100000 [-k http_raw] [pytest args...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def _round(
    examples: int, timeout: float, pytest_args: list[str]
) -> tuple[int, dict[str, Counter[str]]]:
    """One pytest run of ``examples`` cases per target: (exit status, its tally)."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        env = dict(os.environ)
        env.update(
            DESPINA_FUZZ_EXAMPLES=str(examples),
            DESPINA_FUZZ_REPORT=str(report),
            DESPINA_FUZZ_TIMEOUT=str(timeout),
        )
        command = [
            sys.executable, "-m", "pytest", str(HERE.relative_to(ROOT)), "-q", "-p",
            "no:logging", "-o", "timeout=0", *pytest_args,
        ]  # fmt: skip
        child = subprocess.Popen(command, cwd=ROOT, env=env)
        try:
            rc = child.wait()
        except KeyboardInterrupt:  # stop early: report what ran (written every 1000 cases)
            child.terminate()
            child.wait()
            rc = -2
        tally = json.loads(report.read_text()) if report.exists() else {}
    return rc, {target: Counter(counts) for target, counts in tally.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100_000, help="cases per target")
    parser.add_argument(
        "--round", type=int, default=10_000, help="cases per target in one pytest process"
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds that make a hang")
    args, pytest_args = parser.parse_known_args()
    rounds = max(1, math.ceil(args.examples / args.round))
    tally: dict[str, Counter[str]] = {}
    started = time.monotonic()
    rc = 0
    for number in range(rounds):
        size = min(args.round, args.examples - number * args.round)
        print(f"\nround {number + 1} of {rounds}: {size} cases per target", flush=True)
        rc, counts = _round(size, args.timeout, pytest_args)
        for target, got in counts.items():
            tally.setdefault(target, Counter()).update(got)
        if rc == -2:
            print("\ninterrupted: the counts below are those reported so far")
            break
        if rc != 0:
            print(f"\nround {number + 1} failed (exit status {rc}): the campaign stops here")
            break
    elapsed = time.monotonic() - started
    print(f"\nfuzz campaign: {args.examples} examples per target, {elapsed:.0f} s")
    print(f"{'target':<22} {'cases':>9} {'crashes':>8} {'hangs':>6} {'5xx':>5}")
    for target, counts in sorted(tally.items()):
        if target.endswith("-final"):
            continue
        print(
            f"{target:<22} {counts.get('cases', 0):>9} {counts.get('crashes', 0):>8} "
            f"{counts.get('hangs', 0):>6} {counts.get('5xx', 0):>5}"
        )
    return rc


if __name__ == "__main__":
    sys.exit(main())
