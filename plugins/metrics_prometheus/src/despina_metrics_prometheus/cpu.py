"""Host CPU utilization and memory, read from /proc (Linux), sampled periodically."""

from __future__ import annotations

from pathlib import Path

_PROC = Path("/proc")


def cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs since boot, or None where /proc/stat is missing."""
    try:
        fields = (_PROC / "stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    values = [int(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])
    return total - idle, total


def memory() -> tuple[int, int] | None:
    """(total, used) bytes of RAM (used = MemTotal - MemAvailable), or None."""
    try:
        lines = (_PROC / "meminfo").read_text().splitlines()
    except OSError:
        return None
    info = {}
    for line in lines:
        key, _, rest = line.partition(":")
        info[key] = int(rest.split()[0]) * 1024
    total = info.get("MemTotal", 0)
    return total, total - info.get("MemAvailable", info.get("MemFree", 0))


class CpuSampler:
    """Utilization over the last sampling interval (Triton's ``nv_cpu_utilization``)."""

    def __init__(self) -> None:
        self._last = cpu_times()
        self.utilization = 0.0

    def sample(self) -> None:
        """Update :attr:`utilization` from the jiffies since the previous sample."""
        now = cpu_times()
        if now is None or self._last is None:
            return
        busy, total = now[0] - self._last[0], now[1] - self._last[1]
        if total > 0:
            self.utilization = busy / total
        self._last = now
