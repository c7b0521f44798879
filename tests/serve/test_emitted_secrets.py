"""No secret in the files userturn writes for other machines: a literal secret in a manifest's `env:` is refused by
`--emit slurm` / `--emit k8s` with the way to pass it, redacted by `--dry-run`, and `--launcher slurm` writes its
job script mode 600. The emitted sbatch says what to set before submitting and, run as `bash FILE`, fails at once
when the job could not work instead of after the queue; the k8s header names what the cluster needs."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from userturn.cli import main
from userturn.serve.k8s_manifests import render_k8s
from userturn.serve.manifest import parse_manifest
from userturn.serve.slurm_script import render_slurm

TOKEN = "hf_SecretTokenValue123456"
SECRET_ENV = {"HF_TOKEN": TOKEN, "WANDB_API_KEY": "wandb-key-abcdef123456", "DB_PASSWORD": "pw-0123456789",
              "NCCL_DEBUG": "WARN"}


def manifest_file(tmp_path: Path, **more: object) -> Path:
    path = tmp_path / "m.yaml"
    data = {"engine": "vllm", "model": "org/m", "env": SECRET_ENV, "cluster": {"k8s": {"hf_token_secret": "hf"}},
            **more}
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(("emit", "way"), [("slurm", "export DB_PASSWORD=... in the shell that runs sbatch"),
                                           ("k8s", "kubectl create secret generic NAME --from-literal=DB_PASSWORD=")])
def test_emit_refuses_a_literal_secret_with_the_way_to_pass_it(tmp_path: Path, capsys, emit: str, way: str) -> None:
    out = tmp_path / "job"
    assert main(["serve", str(manifest_file(tmp_path)), "--emit", emit, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "env: DB_PASSWORD holds a secret in clear" in err and way in err.replace("`", "")
    assert not out.exists()
    for value in SECRET_ENV.values():
        if value != "WARN":
            assert value not in err


def test_k8s_names_the_hf_token_secret_and_plain_variables_pass(tmp_path: Path) -> None:
    m = parse_manifest({"engine": "vllm", "model": "org/m", "env": {"HF_TOKEN": TOKEN, "NCCL_DEBUG": "WARN"},
                        "cluster": {"k8s": {"hf_token_secret": "hf"}}})
    with pytest.raises(Exception, match=r"the pods read HF_TOKEN from the Secret hf \(key 'token'\): kubectl create"):
        render_k8s(m)
    plain = parse_manifest({"engine": "vllm", "model": "org/m", "env": {"NCCL_DEBUG": "WARN", "HF_TOKEN": ""}})
    assert "NCCL_DEBUG" in render_k8s(plain) and "NCCL_DEBUG=WARN" in render_slurm(plain)


@pytest.mark.parametrize("launcher", [[], ["--launcher", "slurm"]])
def test_dry_run_redacts_secrets_and_shows_the_key_placeholder(tmp_path: Path, capsys, launcher: list[str]) -> None:
    path = manifest_file(tmp_path, api_key="env", api_key_env="SERVE_KEY",
                         extra_args=["--hf-token", "hf_InArgsSecret98765"])
    assert main(["serve", str(path), "--dry-run", *launcher]) == 0
    out = capsys.readouterr().out
    for value in [*SECRET_ENV.values(), *([] if launcher else ["hf_InArgsSecret98765"])]:
        assert (value in out) == (value == "WARN"), value
    assert "[redacted]" in out
    if not launcher:
        assert "<$SERVE_KEY>" in out  # the key's placeholder stays readable


def test_launcher_slurm_writes_its_job_script_mode_600(tmp_path: Path, monkeypatch) -> None:
    from userturn.serve import slurm_launcher

    monkeypatch.setattr(slurm_launcher.shutil, "which", lambda name: "/usr/bin/sbatch")
    monkeypatch.setattr(slurm_launcher, "sbatch", lambda script, **kw: "42")
    m = parse_manifest({"engine": "vllm", "model": "org/m", "env": SECRET_ENV})
    slurm_launcher.submit(m, tmp_path / "run")
    script = tmp_path / "run" / "job.sbatch"
    assert stat.S_IMODE(script.stat().st_mode) == 0o600 and TOKEN in script.read_text()


def fake_sbatch(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose `sbatch` only records its arguments (the real one: tests/serve/test_slurm_cluster.py)."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bin_dir / "sbatch").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "USERTURN_API_KEY", "SERVE_KEY"))}
    return env | {"PATH": f"{bin_dir}:{env['PATH']}"}, calls


def test_the_sbatch_says_what_to_set_and_fails_before_the_queue_without_it(tmp_path: Path) -> None:
    m = parse_manifest({"engine": "vllm", "model": "org/m", "api_key": "env", "api_key_env": "SERVE_KEY"})
    script = tmp_path / "job.sbatch"
    script.write_text(render_slurm(m))
    header = [line for line in script.read_text().splitlines() if line.startswith("# before submitting:")]
    assert header and "export USERTURN_API_KEY or USERTURN_API_KEY_FILE or SERVE_KEY" in header[0]
    env, calls = fake_sbatch(tmp_path)
    failed = subprocess.run(["bash", str(script), "--partition=gpu"], env=env, capture_output=True, text=True,
                            timeout=30)
    assert failed.returncode == 2 and not calls.exists()
    assert failed.stderr.strip() == ("userturn: set USERTURN_API_KEY before submitting (export USERTURN_API_KEY=...): "
                                     "the server requires an API key")
    submitted = subprocess.run(["bash", str(script), "--partition=gpu"], env=env | {"SERVE_KEY": "k" * 20},
                               capture_output=True, text=True, timeout=30)
    assert submitted.returncode == 0, submitted.stderr
    assert calls.read_text().split() == ["--partition=gpu", str(script)]


def test_the_k8s_header_names_the_controller_and_the_claim_it_needs() -> None:
    multi = {"engine": "sglang", "model": "Qwen/Q", "tp_size": 16, "nnodes": 2, "gpus": 16,
             "cluster": {"k8s": {"image": "lmsysorg/sglang:v0.5", "namespace": "ml", "cache_pvc": "hf-cache"}}}
    header = [line for line in render_k8s(parse_manifest(multi)).splitlines() if line.startswith("#")]
    assert any("LeaderWorkerSet controller" in line and "install it first" in line for line in header)
    assert any("PersistentVolumeClaim hf-cache (ReadWriteMany) in the namespace ml" in line for line in header)
    single = render_k8s(parse_manifest({"engine": "vllm", "model": "org/m"}))
    assert "LeaderWorkerSet" not in single and "PersistentVolumeClaim" not in single
