"""One writer per results file: an exclusive advisory lock on a sidecar `<results>.lock`.

`flock(LOCK_EX | LOCK_NB)`, so the kernel releases it however the holder exits. The holder writes its pid, host,
redacted command line and start time into the sidecar (mode 0600); a second writer fails at once with
`ResultsLocked` (exit 2) naming them. Re-entrant within a process (`userturn run` holds the file while each probe
inside it takes it again). On a network file system (type from /proc/mounts) flock may hold on one node only:
taking a lock there warns once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from userturn.core.errors import UserError
from userturn.core.fingerprint import redacted_command


class ResultsLocked(UserError):
    """Another process is writing the same results file."""

    exit_code = 2


class ResultsWriteError(UserError):
    """The results file (or its lock) could not be written: disk full, I/O error, permissions."""

    exit_code = 5


@dataclass
class _Held:
    fd: int
    lock_path: Path
    count: int


_held: dict[str, _Held] = {}
_warned: set[str] = set()
MOUNTS = "/proc/mounts"
# File systems where flock may not be coherent across nodes (kernel client or FUSE type names).
NETWORK_FS = frozenset({"nfs", "nfs4", "lustre", "gpfs", "ceph", "fuse.ceph", "cifs", "smb3", "smbfs", "9p",
                        "beegfs", "fuse.beegfs", "glusterfs", "fuse.glusterfs", "fuse.sshfs", "afs", "pvfs2",
                        "orangefs", "fuse.juicefs", "fuse.s3fs", "fuse.gcsfuse", "wekafs", "panfs"})


def filesystem_type(path: str | Path, mounts: str | None = None) -> str | None:
    """The type of the file system holding `path` (the longest mount point above its real path), None if unknown."""
    target = os.path.realpath(path)
    mounts = mounts or MOUNTS
    best, kind = -1, None
    try:
        with open(mounts, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) < 3:
                    continue
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[1])  # octal escapes
                inside = target == point or target.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= best:
                    best, kind = len(point), parts[2]
    except OSError:
        return None
    return kind


def warn_if_network_fs(lock_path: Path) -> None:
    """One warning line on stderr (once per file) when `lock_path` is on a network file system."""
    name = os.path.realpath(lock_path)
    kind = filesystem_type(lock_path.parent)
    if name in _warned or kind not in NETWORK_FS:
        return
    _warned.add(name)
    print(f"userturn: warning: {lock_path} is on {kind}, where the writer lock (flock) may hold on one node only: "
          "run one writer per results file across nodes", file=sys.stderr, flush=True)


def lock_path_for(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".lock")


def _command() -> str:
    """This process's command line, its program by name (`userturn probe --out ...`), secrets redacted
    (`core.fingerprint.redacted_command`: URL credentials, values of key/token/secret/password flags)."""
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
    name = {"__main__.py": program.parent.name, "-c": "python -c"}.get(program.name, program.name)
    return " ".join([name, *redacted_command(sys.argv[1:])])


def describe_holder(lock_path: Path) -> str:
    """`pid 123 on host, `userturn probe ...`, since 2025-01-01T00:00:00Z` from a sidecar, or what is known. The
    command is redacted again on reading: a sidecar written by another version may hold it raw."""
    try:
        info = orjson.loads(lock_path.read_bytes())
        command = " ".join(redacted_command(str(info["command"]).split(" ")))
        return f"pid {info['pid']} on {info['host']}, `{command}`, since {info['started']}"
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
        return "a process that has not recorded itself yet"


def acquire(path: str | Path) -> None:
    """Take the writer lock of `path` (re-entrant in this process). Raises ResultsLocked if another holds it."""
    lock_path = lock_path_for(path)
    name = os.path.realpath(lock_path)
    held = _held.get(name)
    if held is not None:
        held.count += 1
        return
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        warn_if_network_fs(lock_path)
        while True:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)  # only its owner reads it
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise ResultsLocked(f"{path} is being written by another process ({describe_holder(lock_path)})"
                                        "; wait for it to finish or write to another file") from None
                raise
            # A previous holder may have removed the sidecar between our open and our lock: lock the live one.
            try:
                same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        with contextlib.suppress(OSError):  # a sidecar left by a killed writer of another version may be 0644
            os.fchmod(fd, 0o600)
        os.ftruncate(fd, 0)
        os.write(fd, orjson.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": _command()[:200],
                                   "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + b"\n")
    except OSError as exc:
        raise ResultsWriteError(f"cannot lock {lock_path}: {exc.strerror or exc}") from None
    _held[name] = _Held(fd, lock_path, 1)


def release(path: str | Path) -> None:
    """Give back one hold of the lock; the last one removes the sidecar and unlocks."""
    name = os.path.realpath(lock_path_for(path))
    held = _held.get(name)
    if held is None:
        return
    held.count -= 1
    if held.count > 0:
        return
    del _held[name]
    with contextlib.suppress(OSError):
        held.lock_path.unlink()  # while still locked, so no other process can be holding this inode
    os.close(held.fd)


@contextlib.contextmanager
def results_lock(path: str | Path) -> Iterator[None]:
    """Hold the writer lock of `path` for the duration of the block."""
    acquire(path)
    try:
        yield
    finally:
        release(path)
