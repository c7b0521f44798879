"""Start a server in its own process group with logs to a file; stop the whole group (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
import weakref
from collections import deque
from pathlib import Path

from userturn.core.errors import UserError
from userturn.serve.commands import LaunchSpec

# Set to make every launch still waiting for its servers give up (`run --parallel-models`: Ctrl-C or another
# model's failure while other models' servers start in threads).
ABORT = threading.Event()

DEFAULT_GRACE_S = 15.0
_LIVE: weakref.WeakSet[ServerProcess] = weakref.WeakSet()


class ServerStartError(UserError):
    """A server died, hung, or could not be started: one line with the last log lines."""

    exit_code = 4


class ServerProcess:
    """One launched server: `start()`, `alive`, `tail()`, `stop()` (idempotent, kills the whole group)."""

    def __init__(self, spec: LaunchSpec, log_path: Path) -> None:
        self.spec = spec
        self.log_path = log_path
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"# userturn: {self.spec.shell()}\n".encode())
            log.flush()
            try:
                self.popen = subprocess.Popen(
                    self.spec.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env={**os.environ, **self.spec.env}, start_new_session=True,
                )
            except (FileNotFoundError, PermissionError) as exc:
                why = "not found on PATH" if isinstance(exc, FileNotFoundError) else "permission denied"
                raise ServerStartError(f"{self.spec.name}: cannot start {self.spec.argv[0]!r}: {why}") from None
        _LIVE.add(self)

    def returncode(self) -> int | None:
        return self.popen.poll() if self.popen else None

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def tail(self) -> list[str]:
        return log_tail(self.log_path)

    def stop(self, grace_s: float = DEFAULT_GRACE_S) -> None:
        """SIGTERM the process group, wait up to `grace_s`, then SIGKILL what is left; reap the leader."""
        if self.popen is None:
            return
        pgid = self.popen.pid  # start_new_session: the leader's pid is the group id
        stray = _descendants(pgid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            self.popen.poll()
            try:
                os.killpg(pgid, 0)  # the group is gone when this fails with ProcessLookupError
            except ProcessLookupError:
                break
            except PermissionError:
                pass
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        for proc in stray:  # children that left the group (setsid) still die with their server
            with contextlib.suppress(Exception):
                proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)
        _LIVE.discard(self)


def log_tail(path: Path, lines: int = 8) -> list[str]:
    """The last non-blank lines of a log (our own '# userturn:' header excluded); [] when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return list(deque((ln.rstrip() for ln in fh if ln.strip() and not ln.startswith("# userturn:")),
                              maxlen=lines))
    except OSError:
        return []


def start_error(what: str, log: Path, tail: list[str]) -> ServerStartError:
    """`what (log: LOG); last log lines: a | b` (or `; the log is empty`)."""
    lines = f"; last log lines: {' | '.join(tail)}" if tail else "; the log is empty"
    return ServerStartError(f"{what} (log: {log}){lines}")


def _descendants(pid: int) -> list:
    try:
        import psutil
    except ImportError:
        return []
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


@atexit.register
def _stop_leftovers() -> None:
    """Safety net: servers still running when the interpreter exits are stopped, never orphaned."""
    for proc in list(_LIVE):
        proc.stop(grace_s=5.0)


def port_is_free(host: str, port: int) -> bool:
    """True when `host:port` can be bound (SO_REUSEADDR, like the servers themselves)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pick_ports(host: str, port: int, count: int, *, where: str = "manifest") -> list[int]:
    """`count` ports: consecutive from `port`, or free ones chosen by the OS when `port` is 0."""
    if port == 0:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with contextlib.ExitStack() as stack:  # every socket held until all are bound: distinct ports
            socks = [stack.enter_context(socket.socket(family, socket.SOCK_STREAM)) for _ in range(count)]
            for s in socks:
                s.bind((host, 0))
            return [s.getsockname()[1] for s in socks]
    ports = [port + i for i in range(count)]
    for p in ports:
        if p > 65535:
            raise UserError(f"{where}: port: {port} + {count} replicas runs past 65535")
        if not port_is_free(host, p):
            raise UserError(f"port {p} on {host} is already in use ({where}: port)")
    return ports
