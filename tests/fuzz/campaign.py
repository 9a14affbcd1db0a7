"""``make fuzz``: the property tests of tests/fuzz/ as long campaigns.

Runs pytest on this folder with the "fuzz" hypothesis profile (random seeds, no example
database) and ``--examples`` cases per target, then prints per target the cases run and
the crashes, hangs and server errors (5xx / gRPC INTERNAL, UNKNOWN) met. Each finding also
fails its test, and hypothesis prints the shrunk example.

    python tests/fuzz/campaign.py --examples 100000 [-k http_raw] [pytest args...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100_000, help="cases per target")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds that make a hang")
    args, pytest_args = parser.parse_known_args()
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        env = dict(os.environ)
        env.update(
            DESPINA_FUZZ_EXAMPLES=str(args.examples),
            DESPINA_FUZZ_REPORT=str(report),
            DESPINA_FUZZ_TIMEOUT=str(args.timeout),
        )
        command = [
            sys.executable, "-m", "pytest", str(HERE.relative_to(ROOT)), "-q", "-p",
            "no:logging", "-o", "timeout=0", *pytest_args,
        ]  # fmt: skip
        started = time.monotonic()
        child = subprocess.Popen(command, cwd=ROOT, env=env)
        try:
            rc = child.wait()
        except KeyboardInterrupt:  # stop early: report what ran (written every 1000 cases)
            child.terminate()
            rc = child.wait()
            print("\ninterrupted: the counts below are those reported so far")
        elapsed = time.monotonic() - started
        tally = json.loads(report.read_text()) if report.exists() else {}
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
