"""Cluster targets: an sbatch script (multi-node SGLang via srun) or Kubernetes YAML (Deployment + Service, or a
LeaderWorkerSet when the model spans several nodes)."""

from __future__ import annotations

import re
import shlex
from typing import Any, Literal

import yaml
from userturn.client.errors import UserError
from userturn.serve.commands import server_argv, sglang_argv
from userturn.serve.manifest import Manifest

CLUSTER_PORT = 30000
NODE_RANK = "__USERTURN_NODE_RANK__"
DIST_ADDR = "__USERTURN_DIST_ADDR__"


class _NoAliasDumper(yaml.SafeDumper):
    """Plain YAML for humans and kubectl: repeated dicts are written out, not anchored (&id001)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _slug(text: str) -> str:
    """A DNS-1123 name (lowercase, digits, '-'), at most 50 characters."""
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return (s or "model")[:50].rstrip("-")


def _cluster_argv(m: Manifest, python: str, *, node_rank: str | None = None, dist_addr: str | None = None
                  ) -> list[str]:
    port = m.port or CLUSTER_PORT
    if m.engine == "sglang" and not m.command:
        return sglang_argv(m, port=port, host="0.0.0.0", python=python, node_rank=node_rank, dist_init_addr=dist_addr)
    return server_argv(m, port=port, host="0.0.0.0", python=python)


def _check(m: Manifest) -> None:
    if m.engine == "external":
        raise UserError(f"{m.source or 'manifest'}: engine: 'external' has nothing to deploy")
    if m.nnodes > 1 and (m.engine != "sglang" or m.command):
        raise UserError(f"{m.source or 'manifest'}: nnodes: multi-node needs engine 'sglang'")


# ----- SLURM -----


def render_slurm(m: Manifest) -> str:
    """An sbatch script: one srun task per node; node 0's hostname is the --dist-init-addr; replicas are a job
    array (one independent server per array task)."""
    _check(m)
    s = m.cluster.slurm
    label = _slug(m.label)
    port = m.port or CLUSTER_PORT
    lines = ["#!/bin/bash", f"#SBATCH --job-name=userturn-{label}", f"#SBATCH --nodes={m.nnodes}",
             "#SBATCH --ntasks-per-node=1"]
    if m.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={m.gpus_per_node}")
    lines.append(f"#SBATCH --cpus-per-task={s.cpus_per_task}")
    if s.mem is not None:
        lines.append(f"#SBATCH --mem={s.mem}")
    lines.append(f"#SBATCH --time={s.time}")
    for key in ("partition", "account", "qos"):
        if getattr(s, key):
            lines.append(f"#SBATCH --{key}={getattr(s, key)}")
    if m.replicas > 1:
        lines.append(f"#SBATCH --array=0-{m.replicas - 1}")
    lines.append(f"#SBATCH --output=userturn-{label}-%j.log")
    lines += [f"#SBATCH {a}" for a in s.sbatch_args]
    lines += ["", "set -euo pipefail", *s.setup]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(m.env.items())]
    lines += [
        "",
        'NODES=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))',
        'HEAD_NODE="${NODES[0]}"',
        f'export USERTURN_DIST_INIT_ADDR="$HEAD_NODE:{s.dist_port}"',
        f'echo "userturn: base URL http://$HEAD_NODE:{port}/v1 (model: {m.request_model_name})"',
    ]
    argv = _cluster_argv(m, s.python, node_rank=NODE_RANK, dist_addr=DIST_ADDR)
    inner = shlex.join(argv)
    inner = inner.replace(NODE_RANK, '"$SLURM_NODEID"').replace(DIST_ADDR, '"$USERTURN_DIST_INIT_ADDR"')
    lines.append(f"srun --nodes={m.nnodes} --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c {shlex.quote(inner)}")
    return "\n".join(lines) + "\n"


# ----- Kubernetes -----


def _container(m: Manifest, argv: list[str], *, with_probes: bool) -> dict[str, Any]:
    k = m.cluster.k8s
    port = m.port or CLUSTER_PORT
    env: list[dict[str, Any]] = [{"name": n, "value": v} for n, v in sorted(m.env.items())]
    if k.hf_token_secret:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": k.hf_token_secret, "key": "token"}}})
    limits: dict[str, Any] = {}
    if m.gpus_per_node:
        limits["nvidia.com/gpu"] = m.gpus_per_node
    if k.cpu:
        limits["cpu"] = k.cpu
    if k.memory:
        limits["memory"] = k.memory
    mounts = [{"name": "shm", "mountPath": "/dev/shm"}]
    if k.cache_pvc:
        mounts.append({"name": "hf-cache", "mountPath": "/root/.cache/huggingface"})
    c: dict[str, Any] = {"name": "server", "image": k.image, "command": argv, "env": env,
                         "ports": [{"containerPort": port, "name": "http"}],
                         "resources": {"limits": limits, "requests": dict(limits)}, "volumeMounts": mounts}
    if with_probes:
        path = "/health" if m.engine == "sglang" and not m.health_paths else m.readiness_paths[0]
        probe = {"httpGet": {"path": path, "port": port}, "periodSeconds": 10}
        c["startupProbe"] = {**probe, "failureThreshold": max(1, int(m.timeout_s // 10))}
        c["readinessProbe"] = {**probe, "failureThreshold": 3}
        c["livenessProbe"] = {**probe, "failureThreshold": 6}
    if not env:
        del c["env"]
    return c


def _pod_spec(m: Manifest, container: dict[str, Any]) -> dict[str, Any]:
    k = m.cluster.k8s
    volumes: list[dict[str, Any]] = [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": k.shm_size}}]
    if k.cache_pvc:
        volumes.append({"name": "hf-cache", "persistentVolumeClaim": {"claimName": k.cache_pvc}})
    spec: dict[str, Any] = {"containers": [container], "volumes": volumes}
    if k.node_selector:
        spec["nodeSelector"] = dict(k.node_selector)
    return spec


def render_k8s(m: Manifest) -> str:
    """Deployment (replicas) + Service; for nnodes > 1 a LeaderWorkerSet (one leader + workers per replica)."""
    _check(m)
    k = m.cluster.k8s
    name = f"userturn-{_slug(m.label)}"
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "userturn"}
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if k.namespace:
        meta["namespace"] = k.namespace
    port = m.port or CLUSTER_PORT
    python = "python3"
    docs: list[dict[str, Any]] = []
    if m.nnodes == 1:
        container = _container(m, _cluster_argv(m, python), with_probes=True)
        docs.append({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"replicas": m.replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": _pod_spec(m, container)}},
        })
        selector = labels
    else:
        addr = f"$(LWS_LEADER_ADDRESS):{m.cluster.slurm.dist_port}"
        leader = _container(m, _cluster_argv(m, python, node_rank="0", dist_addr=addr), with_probes=True)
        worker = _container(m, _cluster_argv(m, python, node_rank="$(LWS_WORKER_INDEX)", dist_addr=addr),
                            with_probes=False)
        docs.append({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta,
            "spec": {
                "replicas": m.replicas,
                "leaderWorkerTemplate": {
                    "size": m.nnodes,
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": {"metadata": {"labels": {**labels, "role": "leader"}},
                                       "spec": _pod_spec(m, leader)},
                    "workerTemplate": {"metadata": {"labels": labels}, "spec": _pod_spec(m, worker)},
                },
            },
        })
        selector = {**labels, "role": "leader"}
    docs.append({
        "apiVersion": "v1", "kind": "Service", "metadata": meta,
        "spec": {"type": k.service_type, "selector": selector,
                 "ports": [{"name": "http", "port": port, "targetPort": port}]},
    })
    header = (f"# userturn serve --emit k8s: {m.label} ({m.gpus_per_replica} GPUs per replica x {m.replicas})\n"
              f"# base URL inside the cluster: http://{name}:{port}/v1  (model: {m.request_model_name})\n")
    return header + yaml.dump_all(docs, Dumper=_NoAliasDumper, sort_keys=False, width=1000)


def render(m: Manifest, target: Literal["slurm", "k8s"]) -> str:
    return render_slurm(m) if target == "slurm" else render_k8s(m)
