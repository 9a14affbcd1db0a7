"""The shared memory this server (and its model processes) creates for itself.

Clients may register POSIX shared memory by key; none of the server's own objects may
ever be one of them, whatever name reaches it (a hard link or a rename included). Own
objects live in a private directory of ``/dev/shm`` (mode 0700, an unguessable name,
created exclusively), which a client key, a bare name, cannot reach, and which another
user cannot list, open or link from. A client key is refused when its object *is* one
of ours, compared by identity (``st_dev``, ``st_ino``): an object named in any Despina
private directory of this host, or one this process claimed (an object still alive after
its own name went: the rings of the model processes; a message segment found with
another name).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import threading

#: Prefix of the private directories (and of every key) Despina creates for itself.
INTERNAL_KEY_PREFIX = "despina_internal"
SHM_DIR = "/dev/shm"

#: (st_dev, st_ino) of a shared-memory object.
Identity = tuple[int, int]

_lock = threading.Lock()
_claimed: set[Identity] = set()
_private: list[str] = []


def shm_identity(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino)


def private_shm_dir() -> str:
    """This process's private directory, relative to ``/dev/shm`` (created on first use,
    mode 0700, never an existing one; removed with its contents at exit)."""
    with _lock:
        if not _private:
            name = f"{INTERNAL_KEY_PREFIX}_{secrets.token_hex(16)}"
            path = os.path.join(SHM_DIR, name)
            os.mkdir(path, 0o700)  # FileExistsError rather than reuse
            os.chmod(path, 0o700)  # whatever the umask
            atexit.register(_remove, path, os.getpid())
            _private.append(name)
        return _private[0]


def _remove(path: str, creator: int) -> None:
    """Remove the private directory at exit of the process that made it (not of a fork
    of it that exits normally, which would pull it from under the server)."""
    if os.getpid() == creator:
        shutil.rmtree(path, ignore_errors=True)


def claim_shm(object_identity: Identity) -> None:
    """Count an object as the server's own for the rest of this process's life."""
    with _lock:
        _claimed.add(object_identity)


def is_own(st: os.stat_result) -> bool:
    """Whether the object of ``st`` is shared memory of this server (or of another
    Despina server of this host whose private directory this process can read)."""
    wanted = shm_identity(st)
    with _lock:
        if wanted in _claimed:
            return True
    return any(wanted == found for found in _named_identities())


def _named_identities() -> list[Identity]:
    """The identities of every object named in a Despina private directory."""
    found: list[Identity] = []
    dirs: list[str] = []
    with contextlib.suppress(OSError), os.scandir(SHM_DIR) as top:
        dirs = [e.path for e in top if e.name.startswith(INTERNAL_KEY_PREFIX)]
    for path in dirs:
        with contextlib.suppress(OSError), os.scandir(path) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):  # unlinked since the listing
                    found.append(shm_identity(entry.stat(follow_symlinks=False)))
    return found
