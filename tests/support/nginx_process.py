"""Test helper: Debian's nginx (package `nginx-light`) on a free loopback port rate-limiting completions with
`limit_req` in front of an upstream server, skipped without it."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from ports import free_port, wait_for_port


class Nginx:
    def __init__(self, port: int, log: Path) -> None:
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.log = log

    def refused(self) -> int:
        """Requests nginx refused with its limit (429)."""
        return sum(1 for line in self.log.read_text().splitlines() if line.endswith(" 429"))


@contextlib.contextmanager
def nginx_limit_req(root: Path, upstream: str, *, rate: int = 5, retry_after: str | None = None) -> Iterator[Nginx]:
    """nginx proxying everything to `upstream` (a root URL), `/v1/completions` limited to `rate` requests a second
    per client with no burst (`limit_req`, `limit_req_status 429`: a request sooner than 1/rate s after the last one
    let through gets a 429), with `add_header Retry-After <retry_after> always` when given. Stopped on exit."""
    binary = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)
    if binary is None:
        pytest.skip("nginx is not installed (Debian: apt-get install nginx-light)")
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = root / "access.log"
    conf = root / "nginx.conf"
    user = "user root;\n" if os.geteuid() == 0 else ""
    temp = "".join(f"{kind}_temp_path {root}/{kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi",
                                                                      "scgi"))
    header = f"add_header Retry-After {retry_after} always; " if retry_after is not None else ""
    conf.write_text(
        f"{user}daemon off;\nworker_processes 1;\npid {root}/nginx.pid;\nerror_log {root}/error.log;\n"
        "events { worker_connections 1024; }\n"
        f"http {{\n{temp}log_format status '$request_uri $status';\naccess_log {log} status;\n"
        f"limit_req_zone $binary_remote_addr zone=api:1m rate={rate}r/s;\nlimit_req_status 429;\n"
        f"server {{\nlisten 127.0.0.1:{port};\n"
        f"location /v1/completions {{ limit_req zone=api; {header}proxy_pass {upstream}; }}\n"
        f"location / {{ proxy_pass {upstream}; }}\n}}\n}}\n")
    proc = subprocess.Popen([binary, "-p", str(root), "-c", str(conf), "-e", str(root / "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, "nginx")
        yield Nginx(port, log)
    finally:
        proc.terminate()
        proc.wait(10)
