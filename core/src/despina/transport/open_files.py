"""The process's open-file limit: every connection holds a descriptor, so a server raises
its soft limit (often 1,024) to the hard limit before it listens."""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("despina.transport")


def raise_open_file_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to its hard limit (on Linux, an unlimited hard
    limit means ``fs.nr_open``); the soft limit now. A limit the process may not raise
    is left as it is."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else _nr_open(soft)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError) as exc:
        log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, exc)
        return soft
    log.debug("open-file limit raised from %d to %d", soft, target)
    return target


def _nr_open(default: int) -> int:
    """The kernel's largest per-process descriptor count, else ``default``."""
    try:
        with open("/proc/sys/fs/nr_open") as limit:
            return int(limit.read())
    except (OSError, ValueError):
        return default
