"""Cluster targets: an sbatch script (serve/slurm_script.py) or Kubernetes YAML (serve/k8s_manifests.py)."""

from __future__ import annotations

from typing import Literal

from userturn.serve.k8s_manifests import render_k8s
from userturn.serve.manifest import Manifest
from userturn.serve.slurm_script import render_slurm


def render(m: Manifest, target: Literal["slurm", "k8s"]) -> str:
    return render_slurm(m) if target == "slurm" else render_k8s(m)


__all__ = ["render", "render_k8s", "render_slurm"]
