"""Secrets in a manifest's `env:` and the files userturn writes for other machines: `--emit slurm` and `--emit k8s`
write files others may read (and print them), so a literal value of a variable named like a secret
(`fingerprint.is_secret_name`: ...KEY, ...TOKEN, ...SECRET, ...PASSWORD) is refused there in one line that says how to
pass it instead: exported in the shell that submits the job (SLURM passes the submitting environment on), or a
Kubernetes Secret the pod reads. `--launcher slurm` writes its job script mode 600 (as the API key file); `--dry-run`
shows such values as `[redacted]` (`fingerprint.redacted_environment`).
"""

from __future__ import annotations

from typing import Literal

from userturn.core.errors import UserError
from userturn.core.fingerprint import is_secret_name
from userturn.serve.manifest import Manifest


def secret_env(m: Manifest) -> list[str]:
    """The names of the manifest's `env:` entries that hold a literal secret (named like one, not empty)."""
    return sorted(name for name, value in m.env.items() if value and is_secret_name(name))


def refuse_secret_env(m: Manifest, emit: Literal["slurm", "k8s"]) -> None:
    """UserError (exit 2) naming the first literal secret of `env:` and the way to pass it to the `emit` target."""
    names = secret_env(m)
    if not names:
        return
    name = names[0]
    where = m.source or "manifest"
    if emit == "slurm":
        how = (f"remove it from env: and `export {name}=...` in the shell that runs sbatch (the job inherits the "
               "submitting shell's environment)")
    elif name == "HF_TOKEN":
        k = m.cluster.k8s
        how = (f"remove it from env:; the pods read HF_TOKEN from the Secret {k.hf_token_secret} (key 'token'): "
               f"kubectl create secret generic {k.hf_token_secret} --from-literal=token=...")
    else:
        how = (f"remove it from env: and give it to the pod from a Secret: kubectl create secret generic NAME "
               f"--from-literal={name}=..., then in the emitted container's env: {{name: {name}, valueFrom: "
               f"{{secretKeyRef: {{name: NAME, key: {name}}}}}}}")
    raise UserError(f"{where}: env: {name} holds a secret in clear, which --emit {emit} would write into a file "
                    f"others can read: {how}")
