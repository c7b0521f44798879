"""No secret anywhere but where it is used: a probe and sharded runs (local processes and a SLURM array) with an API
key and a password-protected proxy (a real tinyproxy with BasicAuth) against a loopback server that requires the key,
then every file they wrote and every line they printed is searched for the key and the password."""

from __future__ import annotations

import base64
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_process import QWEN_DIR, USERTURN
from fake_slurm import fake_slurm
from loopback_server import LoopbackServer
from results_lines import record_lines
from shard_runs import write_dataset
from tinyproxy_process import tinyproxy

pytestmark = pytest.mark.slow

KEY = "sk-sweep-Zq81xYw/4+kLm=="
WRONG_KEY = "sk-wrong-7Hc2NvB0pRtE"
PASSWORD = "pwHq3rT9zXk42"  # tinyproxy takes letters and digits only
HOLDER = "import sys, time\nfrom userturn.core.results_lock import acquire\nacquire(sys.argv[1])\nprint('LOCKED', " \
         "flush=True)\ntime.sleep(600)\n"


def forms(secret: str) -> list[bytes]:
    """`secret` as it could appear in a file or a message: as is, percent-encoded, base64 (Basic auth)."""
    return [secret.encode(), urllib.parse.quote(secret, safe="").encode(), base64.b64encode(secret.encode())]




@pytest.fixture
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(URL, log) of a tinyproxy requiring `alice:PASSWORD` (its files live outside the swept folder); skipped
    without it."""
    with tinyproxy(tmp_path_factory.mktemp("tinyproxy"), settings=f"BasicAuth alice {PASSWORD}\n") as (port, log):
        yield f"http://alice:{PASSWORD}@127.0.0.1:{port}", log


def test_no_file_or_output_of_a_run_holds_the_key_or_the_proxy_password(tmp_path: Path,
                                                                        proxy: tuple[str, Path]) -> None:
    proxy_url, proxy_log = proxy
    work = tmp_path / "work"  # everything userturn writes goes here; the key file the user made sits beside it
    work.mkdir()
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    write_dataset(work / "data.jsonl", n=6)
    fake, env = fake_slurm(tmp_path)
    env = {**env, "UT_KEY": KEY, "UT_WRONG": WRONG_KEY, "NO_PROXY": "", "no_proxy": ""}
    outputs: list[str] = []

    def userturn(*args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*USERTURN, *args], capture_output=True, text=True, timeout=240, env=env, cwd=work)
        outputs.extend([proc.stdout, proc.stderr])
        return proc

    with LoopbackServer("--api-key", KEY) as server:
        probe = ["probe", "--base-url", server.base_url, "--model", "loopback", "--dataset", "data.jsonl",
                 "--tokenizer", QWEN_DIR, "--no-progress", "--proxy", proxy_url]
        ok = userturn(*probe, "--out", "probe.jsonl", "--api-key-file", str(key_file))
        assert ok.returncode == 0, ok.stderr
        assert [r["status"] for r in record_lines(work / "probe.jsonl")] == ["ok"] * 6  # through the proxy, keyed
        refused = userturn(*probe, "--out", "refused.jsonl", "--api-key-env", "UT_WRONG")
        assert refused.returncode == 3 and "(key from $UT_WRONG)" in refused.stderr, refused.stderr
        typed = userturn(*probe, "--out", "typed.jsonl", "--api-key", KEY)  # as openai-python users pass it
        assert typed.returncode == 2 and "--api-key-env NAME" in typed.stderr and "--api-key-file PATH" in typed.stderr

        (work / "exp.yaml").write_text(
            f"name: sweep\nmodels: [{{base_url: {server.base_url}, model: loopback, tokenizer: {QWEN_DIR}, "
            "api_key_env: UT_KEY}]\ndatasets: [data.jsonl]\ntemperatures: [0.5]\n")
        shard_file = work / "local" / "sweep" / "results.shard-2-of-2.jsonl"
        shard_file.parent.mkdir(parents=True)
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(shard_file), "--proxy", proxy_url],
                                  stdout=subprocess.PIPE, text=True, env=env)
        try:  # shard 2's file is held by another writer: its refusal and its failed-shard line are printed
            assert holder.stdout is not None and holder.stdout.readline().strip() == "LOCKED"
            local = userturn("run", "exp.yaml", "--out-dir", "local", "--workers", "2", "--proxy", proxy_url)
        finally:
            holder.kill()
            holder.wait()
        assert local.returncode == 2 and "userturn: shard 2/2 exited 2" in local.stderr, local.stderr
        assert "is being written by another process" in local.stderr
        slurm = userturn("run", "exp.yaml", "--out-dir", "slurm", "--workers", "2", "--launcher", "slurm",
                         "--proxy", proxy_url)
        assert slurm.returncode == 0, slurm.stderr
        assert (work / "slurm" / "sweep" / "slurm-shards" / "shards.sbatch").is_file()
        assert all(r["status"] == "ok" for i in (1, 2)
                   for r in record_lines(work / "slurm" / "sweep" / f"results.shard-{i}-of-2.jsonl"))

    assert proxy_log.read_text(errors="replace").count("Request (file descriptor") >= 12  # every run went through it
    written = [p for p in [*work.rglob("*"), *fake.rglob("*")] if p.is_file()]
    assert len(written) > 10
    secrets = [form for secret in (KEY, WRONG_KEY, PASSWORD) for form in forms(secret)]
    leaks = [f"{p}: {form.decode()}" for p in written for form in secrets if form in p.read_bytes()]
    leaks += [f"output: {form.decode()}" for text in outputs for form in secrets if form.decode() in text]
    assert leaks == []
    for path in written:
        if path.name.endswith(".lock"):
            assert path.stat().st_mode & 0o777 == 0o600


def test_a_launched_servers_log_names_its_command_without_its_key(tmp_path: Path) -> None:
    """The `# userturn: ...` line heading a launched server's log: the server's key and a token in its environment
    redacted (the process itself gets them)."""
    from userturn.serve.commands import LaunchSpec
    from userturn.serve.process import ServerProcess

    code = "import os, sys; print(os.environ['HF_TOKEN'], sys.argv[2])"
    spec = LaunchSpec(name="s", argv=[sys.executable, "-c", code, "--api-key", KEY], host="127.0.0.1", port=1,
                      health_paths=("/health",),
                      env={"HF_TOKEN": WRONG_KEY, "HTTPS_PROXY": f"http://alice:{PASSWORD}@proxy:3128"}, api_key=KEY)
    server = ServerProcess(spec, tmp_path / "server.log")
    server.start()
    deadline = time.monotonic() + 30
    while server.alive and time.monotonic() < deadline:
        time.sleep(0.05)
    server.stop()
    head, printed = (tmp_path / "server.log").read_text().splitlines()[:2]
    assert head.startswith("# userturn: HF_TOKEN='[redacted]' HTTPS_PROXY='http://[redacted]@proxy:3128' ")
    assert head.endswith("--api-key '[redacted]'") and KEY not in head and WRONG_KEY not in head
    assert PASSWORD not in head
    assert printed == f"{WRONG_KEY} {KEY}"  # what the server itself was given
