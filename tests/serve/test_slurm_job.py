"""`python -m userturn.serve.slurm_job resolve-model`: an engine's model, resolved inside the job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from userturn.serve.slurm_job import main, resolve_model_exports


def exported(line: str) -> dict[str, str]:
    """Run the line through bash and read the variables back."""
    out = subprocess.run(["bash", "-c", f'{line}\nprintf "%s\\n" "$MODEL" "$SERVED"'], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    return dict(zip(["MODEL", "SERVED"], out, strict=True))


def test_local_dir_is_served_as_is(tmp_path: Path) -> None:
    model = tmp_path / "my model"  # a space survives the shell
    model.mkdir()
    assert exported(resolve_model_exports("transformers", str(model), "mine")) == {"MODEL": str(model),
                                                                                  "SERVED": "mine"}


def test_packaged_gguf_is_found_in_the_jobs_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    (site / "somepkg").mkdir(parents=True)
    (site / "somepkg" / "__init__.py").write_text("")
    gguf = site / "somepkg" / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(site))
    assert exported(resolve_model_exports("llamacpp", "pkg:somepkg/m.gguf", "small")) == {"MODEL": str(gguf),
                                                                                         "SERVED": "small"}


def test_no_fallback_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "userturn.serve.slurm_job", "resolve-model", "--engine",
                           "transformers", "--model",
                           "userturn-test/not-cached-anywhere", "--served-model-name", "x"],
                          capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "HOME": str(tmp_path),
                                                               "PATH": "/usr/bin:/bin"}, timeout=120, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "cannot get 'userturn-test/not-cached-anywhere'" in proc.stderr
    assert main(["resolve-model", "--engine", "transformers", "--model", str(tmp_path),
                 "--served-model-name", "x"]) == 0
