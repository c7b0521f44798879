"""Shared pytest fixtures. Each helper appends its own clearly marked block."""

from __future__ import annotations

# ======================================================================================================
# serve/ fixtures (owner: serve helper): the tiny random-weight model and ONE real CPU-engine process
# per test session (startup takes tens of seconds on a 2-core CI box).
# ======================================================================================================
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Qwen3 ChatML model + tokenizer on disk (built once per session)."""
    from userturn.serve.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def cpu_engine_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real `serve.cpu_engine` process serving the tiny model, launched through `serve.launcher.launch`.
    Yields the `serve.launcher.Server` (base_urls[0] ends in /v1, model_name is 'tiny')."""
    from userturn.serve.launcher import launch
    from userturn.serve.manifest import parse_manifest

    manifest = parse_manifest({
        "engine": "transformers", "model": str(tiny_model_dir), "served_model_name": "tiny", "seed": 0,
        "startup_timeout": 300, "extra_args": ["--threads", "1"],
    })
    import os
    import time

    import psutil

    with launch(manifest, log_dir=tmp_path_factory.mktemp("serve-logs"), status=None) as server:
        pgid = server.processes[0].pid
        pids = [pgid, *(c.pid for c in psutil.Process(pgid).children(recursive=True))]
        yield server
    # Teardown must leave no process: the group is gone and so is every process it had.
    try:
        os.killpg(pgid, 0)
        raise AssertionError(f"process group {pgid} of the CPU engine survived teardown")
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 5
    while any(psutil.pid_exists(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if psutil.pid_exists(p)], "CPU engine processes survived teardown"
# ======================================================================================================
# end of serve/ fixtures
# ======================================================================================================


# ======================================================================================================
# HTTP client tests: the process-wide network settings
# ======================================================================================================
@pytest.fixture
def fresh_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy or CA from the machine, and the process-wide network settings back to their defaults afterwards
    (`pytestmark = pytest.mark.usefixtures("fresh_network")` in a module that needs it)."""
    from userturn.client.http import http_client

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setattr(http_client, "NETWORK", http_client.Network())
