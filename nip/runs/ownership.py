"""One owner per run directory and sweep directory: a second writer is refused, a dead one's
place is taken.

Whatever writes a run's or sweep's folder owns it for that time (``with owning(path, "training")``).
The owner holds an exclusive ``flock`` on ``owner.lock`` (a POSIX lock on NFS) and writes there
who it is; a second owner, in any process on any node sharing the folder, gets
:class:`DirectoryInUseError` naming the first. The kernel drops a dead process's lock (even after
``kill -9``), so the next owner takes it and :attr:`Ownership.taken_over_from` names the dead one;
forked children close their copy of the descriptor (``os.register_at_fork``). A new owner removes
interrupted atomic writes' temporaries (``.<name>.<8 chars>.tmp``), but not in sub-folders owned on
their own (sweep cells), ``jobs/``, ``serve/`` or ``control.json``'s. Claims nest within one task
or thread (and the asyncio tasks it starts); elsewhere in the process they are refused, since the
lock file is opened once per process (closing any descriptor drops NFS's POSIX locks). Shared file
systems must implement POSIX locks across nodes (docs/reliability.md); where locks are refused,
nip warns once and goes on without one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from nip.errors import NipError

__all__ = [
    "LOCK_FILE",
    "DirectoryInUseError",
    "FolderError",
    "Owner",
    "Ownership",
    "abandoned",
    "current_owner",
    "owning",
    "remove_stale_temporaries",
]

#: The lock file every owned folder holds; its text names the owner while one holds it.
LOCK_FILE = "owner.lock"

#: An interrupted atomic write's temporary file: ``tempfile.mkstemp``'s 8 random characters.
_TEMPORARY = re.compile(r"^\.(?P<target>.+)\.[a-z0-9_]{8}\.tmp$")
#: Sub-folders (and files) of an owned folder whose writers are not its owner.
_NOT_THE_OWNERS = frozenset({"jobs", "serve", "control.json"})

#: Errors by which a file system says it has no locks (or none across the network).
_NO_LOCKS = frozenset({errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP})


@dataclass(frozen=True)
class Owner:
    """Who owns a folder: a process on a host, since when, doing what."""

    pid: int
    host: str
    since: float
    what: str

    def __str__(self) -> str:
        if not self.pid:  # an owner that has not written its record yet
            return self.what
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"{self.what} by pid {self.pid} on {self.host} since {since}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        """The owner a lock file's text names (None: empty, or not nip's)."""
        try:
            data = json.loads(text)
            return cls(int(data["pid"]), str(data["host"]), float(data["since"]), data["what"])
        except (ValueError, TypeError, KeyError):
            return None


class DirectoryInUseError(NipError):
    """A run or sweep directory is owned by another process (or another task of this one);
    ``owner`` is None when the lock file does not name it yet."""

    def __init__(self, path: str | Path, owner: Owner | None):
        self.path, self.owner = Path(path), owner
        who = owner or "another process (which has not said who yet)"
        super().__init__(f"{path} is in use: {who}; wait for it to end (or stop it), then retry")


class FolderError(NipError, OSError):
    """A folder to own is a file, or cannot be made."""


@dataclass
class Ownership:
    """A held claim on a folder (what :func:`owning` yields); ``taken_over_from`` names a
    process that died holding it (None after a clean release)."""

    path: Path
    owner: Owner
    taken_over_from: Owner | None = None


class _Held:
    """A lock this process holds: its descriptor and its record."""

    def __init__(self, fd: int, ownership: Ownership):
        self.fd, self.ownership = fd, ownership
        self.pid = os.getpid()  # a forked child inherits the table, not the lock


# The locks this process holds, by lock file path. It mirrors the kernel's lock table, which
# is per process for POSIX locks: one descriptor per lock file per process, so that no second
# descriptor of a held lock file is ever opened (closing it would drop the lock on NFS).
_HELD: dict[str, _Held] = {}
_TABLE = threading.Lock()
# The lock files this task or thread holds: a nested claim of one of them is the same owner.
_MINE: ContextVar[frozenset[str]] = ContextVar("nip_owned_folders", default=frozenset())


def _close_in_child() -> None:
    """In a forked child: close the inherited lock descriptors (an ``flock`` lives while any
    copy is open; the parent's lock is untouched)."""
    for held in _HELD.values():
        with contextlib.suppress(OSError):
            os.close(held.fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_close_in_child)


def _lock_path(path: str | Path) -> str:
    return str(Path(path).resolve() / LOCK_FILE)


def _read_owner(lock_file: str) -> Owner | None:
    try:
        return Owner.parse(Path(lock_file).read_text(encoding="utf-8"))
    except OSError:
        return None


def _live_hold(key: str) -> _Held | None:
    held = _HELD.get(key)
    if held is not None and held.pid != os.getpid():
        del _HELD[key]  # inherited through fork: the child never held it
        return None
    return held


@contextmanager
def owning(path: str | Path, what: str, *, wait_s: float = 0.0) -> Iterator[Ownership]:
    """Own the folder ``path`` (made if missing) for the ``with`` block, doing ``what`` (as
    others read it); ``wait_s``: how long to wait for another owner to let go (0: refuse).

    Raises:
        DirectoryInUseError: Another process, task or thread owns it (after ``wait_s``).
        FolderError: ``path`` is a file, or cannot be made.
    """
    key = _lock_path(path)
    with _TABLE:
        held = _live_hold(key)
    if held is not None and key in _MINE.get():
        yield held.ownership  # a nested claim of this task's own folder
        return
    held = _acquire(path, key, what, wait_s)
    if held is None:  # the file system has no locks: go on without one
        yield Ownership(Path(path), Owner(os.getpid(), socket.gethostname(), time.time(), what))
        return
    token = _MINE.set(_MINE.get() | {key})
    try:
        yield held.ownership
    finally:
        _MINE.reset(token)
        _release(key, held)


def _lock(fd: int, wait_s: float) -> bool:
    """Take ``fd``'s exclusive lock within ``wait_s`` s (False: still held elsewhere)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def _acquire(path: str | Path, key: str, what: str, wait_s: float) -> _Held | None:
    with _TABLE:
        other = _live_hold(key)
        if other is not None:  # another task or thread of this process
            raise DirectoryInUseError(path, other.ownership.owner)
        _make_folder(path)
        owner = Owner(os.getpid(), socket.gethostname(), time.time(), what)
        fd = os.open(key, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            locked = _lock(fd, wait_s)
        except OSError as error:
            os.close(fd)
            if error.errno not in _NO_LOCKS:
                raise
            from nip.utils.notices import warn

            warn(
                f"the file system of {path} has no file locks ({error.strerror}): a second "
                "copy of this command on the same folder would not be refused"
            )
            return None
        if not locked:
            os.close(fd)
            raise DirectoryInUseError(path, _read_owner(key))
        held = _Held(fd, Ownership(Path(path), owner))
        previous = os.pread(fd, 4096, 0).decode(errors="replace")
        held.ownership.taken_over_from = Owner.parse(previous)
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(owner.__dict__) + "\n").encode(), 0)
        _HELD[key] = held
        remove_stale_temporaries(path)
        return held


def remove_stale_temporaries(path: str | Path) -> list[Path]:
    """Remove (and return) the temporaries of interrupted atomic writes in ``path``'s own
    files (see the module's docstring for what is left alone)."""
    removed = []
    for folder, subfolders, files in os.walk(path):
        here = Path(folder)
        subfolders[:] = [
            name
            for name in subfolders
            if name not in _NOT_THE_OWNERS and not (here / name / LOCK_FILE).exists()
        ]
        for name in files:
            match = _TEMPORARY.match(name)
            if match and match["target"] not in _NOT_THE_OWNERS:
                with contextlib.suppress(FileNotFoundError):
                    (here / name).unlink()
                    removed.append(here / name)
    return removed


def _make_folder(path: str | Path) -> None:
    if Path(path).exists() and not Path(path).is_dir():
        raise FolderError(f"{path} is a file, not a folder")
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise FolderError(f"cannot make the folder {path}: {error.strerror}") from None


def _release(key: str, held: _Held) -> None:
    with _TABLE:
        if _HELD.get(key) is held:
            del _HELD[key]
        with contextlib.suppress(OSError):
            os.ftruncate(held.fd, 0)  # released cleanly: the file names nobody
        os.close(held.fd)  # which releases the lock


def current_owner(path: str | Path) -> Owner | None:
    """The live owner of the folder ``path`` (None: nobody holds it, whatever a dead
    process's lock file says). Writes nothing."""
    key = _lock_path(path)
    with _TABLE:
        held = _live_hold(key)
        if held is not None:
            return held.ownership.owner
        if not Path(key).is_file():
            return None
        fd = os.open(key, os.O_RDWR)  # writable: an NFS (POSIX) write lock needs it
        try:
            if not _lock(fd, 0.0):
                return _read_owner(key) or Owner(0, "", 0.0, "another process")
        except OSError:
            return None  # no locks on this file system: nobody can be seen holding one
        finally:
            os.close(fd)
        return None


def abandoned(path: str | Path) -> bool:
    """Whether the folder's last owner died holding it (killed: its lock file still names it,
    and nobody holds the lock); False where the file system has no locks, as nobody can tell."""
    return current_owner(path) is None and _read_owner(_lock_path(path)) is not None
