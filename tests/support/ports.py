"""Test helper: free loopback ports, and waiting for a process to listen on one."""

from __future__ import annotations

import socket
import time

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, what: str, timeout: float = 15.0) -> None:
    """Return once something accepts connections on 127.0.0.1:`port`; fail the test naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    pytest.fail(f"{what} did not start")
