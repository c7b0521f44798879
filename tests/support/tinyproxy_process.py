"""Test helper: a real tinyproxy (Debian package `tinyproxy`) on a free loopback port, skipped without it."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from ports import free_port, wait_for_port


@contextlib.contextmanager
def tinyproxy(folder: Path, *, settings: str = "", max_clients: int = 64,
              log_level: str = "Connect") -> Iterator[tuple[int, Path]]:
    """(port, log file) of a tinyproxy allowing 127.0.0.1, its configuration and log in `folder`; `settings` are
    extra configuration lines (e.g. `BasicAuth USER PASSWORD`). Stopped on exit."""
    binary = shutil.which("tinyproxy")
    if binary is None:
        pytest.skip("tinyproxy is not installed (Debian: apt-get install tinyproxy)")
    port, log, conf = free_port(), folder / "tinyproxy.log", folder / "tinyproxy.conf"
    conf.write_text(f'Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients {max_clients}\nAllow 127.0.0.1\n'
                    f'{settings}LogFile "{log}"\nLogLevel {log_level}\n')
    proc = subprocess.Popen([binary, "-d", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, "tinyproxy", timeout=10)
        yield port, log
    finally:
        proc.terminate()
        proc.wait(10)
