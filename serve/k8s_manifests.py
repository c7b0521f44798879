"""Kubernetes YAML for a manifest: a Deployment + Service, or for nnodes > 1 a LeaderWorkerSet + leader Service;
with `router:` also an sglang-router Deployment + Service that discovers the serving pods by label. GPU Deployments
roll out with `Recreate` (no spare GPUs needed); multi-node needs a shared model cache, never an emptyDir.
"""

from __future__ import annotations

from typing import Any

import yaml

from userturn.core.errors import UserError
from userturn.serve.commands import ROUTER_MODULE, server_argv
from userturn.serve.engines import ENGINES, engine_of
from userturn.serve.k8s_files import config_map, mount_files, pod_manifest
from userturn.serve.manifest import Manifest
from userturn.serve.secret_env import refuse_secret_env
from userturn.serve.slurm_script import check_deployable, slug

CLUSTER_PORT = 30000
DEFAULT_DIST_PORT = 50000
ROUTER_IMAGE = next((e.image for e in ENGINES.values() if e.has_router and e.image), "")  # the engine's own image
CACHE_DIR = "/root/.cache/huggingface"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
PROBE_PERIOD_S = 10


class _NoAliasDumper(yaml.SafeDumper):
    """Plain YAML for humans and kubectl: repeated dicts are written out, not anchored (&id001)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def image(m: Manifest) -> str:
    """The container image: the manifest's, else the engine's pinned default, else a one-line UserError."""
    found = m.cluster.k8s.image or engine_of(m).default_image(m)
    if found:
        return found
    what = "a custom command" if m.command else f"engine '{m.engine}'"
    defaults = ", ".join(f"{e.image} ({k})" for k, e in ENGINES.items() if e.image)
    raise UserError(f"{m.source or 'manifest'}: cluster.k8s.image: {what} needs an image that has it installed "
                    f"(the defaults {defaults} have only their own engine)")


API_KEY_REF = "$(USERTURN_API_KEY)"  # expanded by Kubernetes from the container's env (the api_key Secret)


def _argv(m: Manifest, *, node_rank: str | None = None, dist_addr: str | None = None) -> list[str]:
    return server_argv(m, port=m.port or CLUSTER_PORT, host="0.0.0.0", python="python3", node_rank=node_rank,
                       dist_init_addr=dist_addr, api_key=API_KEY_REF if m.api_key else None, target="k8s",
                       image=image(m))


def _probes(path: str, port: int, startup_s: float | None = None) -> dict[str, Any]:
    """Readiness and liveness give a busy server 5 s / 10 s to answer; a startup probe allows `startup_s`."""
    get = {"httpGet": {"path": path, "port": port}, "periodSeconds": PROBE_PERIOD_S}
    startup = max(1, int(startup_s // PROBE_PERIOD_S)) if startup_s is not None else None
    return {**({"startupProbe": {**get, "timeoutSeconds": 5, "failureThreshold": startup}} if startup else {}),
            "readinessProbe": {**get, "timeoutSeconds": 5, "failureThreshold": 3},
            "livenessProbe": {**get, "timeoutSeconds": 10, "failureThreshold": 6}}


def _container(m: Manifest, argv: list[str], *, with_probes: bool) -> dict[str, Any]:
    k = m.cluster.k8s
    port = m.port or CLUSTER_PORT
    env: list[dict[str, Any]] = [{"name": n, "value": v} for n, v in sorted(m.env.items())]
    env.append({"name": "HF_HOME", "value": CACHE_DIR})
    if k.cache_host_path:  # pre-staged weights: never download
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": k.hf_token_secret, "key": "token",
                                                                   "optional": True}}})
    if m.api_key:  # the readiness routes (/health) of SGLang, vLLM and llama.cpp need no key
        env.append({"name": "USERTURN_API_KEY", "valueFrom": {"secretKeyRef": {"name": k.api_key_secret,
                                                                               "key": "key"}}})
    limits = {name: value for name, value in (("nvidia.com/gpu", m.gpus_per_node), ("cpu", k.cpu),
                                              ("memory", k.memory)) if value}
    c: dict[str, Any] = {
        "name": "server", "image": image(m), "command": argv, "env": env,
        "ports": [{"containerPort": port, "name": "http"}],
        "resources": {"limits": limits, "requests": dict(limits)},
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "model-cache", "mountPath": CACHE_DIR}],
    }
    if with_probes:
        path = m.readiness_paths[0] if m.command or m.health_paths else engine_of(m).k8s_health_path
        c.update(_probes(path, port, m.timeout_s))
    return c


def _pod_spec(m: Manifest, container: dict[str, Any], files: str | None = None) -> dict[str, Any]:
    k = m.cluster.k8s
    cache: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": k.cache_pvc}} if k.cache_pvc
        else {"hostPath": {"path": k.cache_host_path, "type": "Directory"}} if k.cache_host_path
        else {"emptyDir": {}})
    spec: dict[str, Any] = {
        "containers": [container],
        "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": k.shm_size}},
                    {"name": "model-cache", **cache}],
    }
    if files:
        mount_files(spec, files)
    if k.node_selector:
        spec["nodeSelector"] = dict(k.node_selector)
    tolerations = k.tolerations if k.tolerations is not None else ([GPU_TOLERATION] if m.gpus_per_node else [])
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    return spec


def _router_docs(m: Manifest, name: str, ns: dict[str, str], worker_labels: dict[str, str]) -> list[dict[str, Any]]:
    """sglang-router in its own Deployment, finding the serving pods by label (Kubernetes service discovery, so it
    follows pods as they come and go), with the RBAC to watch pods, and a Service in front of it."""
    assert m.router is not None
    k = m.cluster.k8s
    rname = f"{name}-router"
    labels = {"app.kubernetes.io/name": rname, "app.kubernetes.io/part-of": "userturn"}
    meta = {"name": rname, **ns, "labels": labels}
    port = m.router.port or CLUSTER_PORT
    selector = [f"{key}={value}" for key, value in worker_labels.items() if key != "app.kubernetes.io/part-of"]
    argv = ["python3", "-m", ROUTER_MODULE, "--service-discovery", "--selector", *selector,
            "--service-discovery-port", str(m.port or CLUSTER_PORT), "--service-discovery-namespace",
            "$(POD_NAMESPACE)", "--host", "0.0.0.0", "--port", str(port), "--policy", m.router.policy,
            *m.router.extra_args]
    container = {
        "name": "router", "image": k.image or ROUTER_IMAGE, "command": argv,
        "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "ports": [{"containerPort": port, "name": "http"}], **_probes("/health", port),
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "subjects": [{"kind": "ServiceAccount", "name": rname, **ns}],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": rname}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"serviceAccountName": rname, "containers": [container]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta,
         "spec": {"type": k.service_type, "selector": labels,
                  "ports": [{"name": "http", "port": port, "targetPort": port}]}},
    ]


def check_model_cache(m: Manifest) -> None:
    """Multi-node pods need weights that outlive them: a ReadWriteMany PVC or a pre-staged path (one-line error)."""
    k = m.cluster.k8s
    if m.nnodes > 1 and not (k.cache_pvc or k.cache_host_path):
        raise UserError(f"{m.source or 'manifest'}: cluster.k8s: nnodes {m.nnodes} needs a shared model cache: add "
                        "cache_pvc: NAME (a ReadWriteMany PersistentVolumeClaim) or cache_host_path: /DIR (weights "
                        "pre-staged on every node); an emptyDir downloads the weights again in every pod, each time "
                        "the LeaderWorkerSet recreates the group")


def render_k8s(m: Manifest) -> str:
    """Deployment (replicas) + Service; for nnodes > 1 a LeaderWorkerSet (one leader + workers per replica) and a
    Service named `<name>-leader` (the LWS controller creates its own headless Service under the LWS's name)."""
    check_deployable(m)
    check_model_cache(m)
    refuse_secret_env(m, "k8s")  # the YAML is printed or written for others: a secret goes in a Secret
    m, shipped = pod_manifest(m, CACHE_DIR)  # only what exists in the pod: no path of this machine
    k = m.cluster.k8s
    name = f"userturn-{slug(m.label)}"
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "userturn"}
    ns = {"namespace": k.namespace} if k.namespace else {}
    port = m.port or CLUSTER_PORT
    files = f"{name}-files" if shipped else None
    docs: list[dict[str, Any]] = [config_map(files, ns, labels, shipped)] if files else []
    if m.nnodes == 1:
        service_name = name
        container = _container(m, _argv(m), with_probes=True)
        spec: dict[str, Any] = {"replicas": m.replicas, "selector": {"matchLabels": labels},
                                "template": {"metadata": {"labels": labels}, "spec": _pod_spec(m, container, files)}}
        if m.gpus_per_node:
            spec["strategy"] = {"type": "Recreate"}  # a rolling update would need a second set of free GPUs
        docs.append({"apiVersion": "apps/v1", "kind": "Deployment",
                     "metadata": {"name": name, **ns, "labels": labels}, "spec": spec})
        selector = labels
    else:
        service_name = f"{name}-leader"
        addr = f"$(LWS_LEADER_ADDRESS):{m.cluster.slurm.dist_port or DEFAULT_DIST_PORT}"
        leader = _container(m, _argv(m, node_rank="0", dist_addr=addr), with_probes=True)
        worker = _container(m, _argv(m, node_rank="$(LWS_WORKER_INDEX)", dist_addr=addr), with_probes=False)
        leader_labels = {**labels, "role": "leader"}
        docs.append({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, **ns, "labels": labels},
            "spec": {
                "replicas": m.replicas,
                "leaderWorkerTemplate": {
                    "size": m.nnodes,
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": {"metadata": {"labels": leader_labels}, "spec": _pod_spec(m, leader, files)},
                    "workerTemplate": {"metadata": {"labels": labels}, "spec": _pod_spec(m, worker, files)},
                },
            },
        })
        selector = leader_labels
    docs.append({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": service_name, **ns, "labels": labels},
        "spec": {"type": k.service_type, "selector": selector,
                 "ports": [{"name": "http", "port": port, "targetPort": port}]},
    })
    if m.router is not None:
        docs += _router_docs(m, name, ns, selector)
        service_name, port = f"{name}-router", m.router.port or CLUSTER_PORT
    where = f"{service_name}.{k.namespace}" if k.namespace else service_name
    header = (f"# userturn serve --emit k8s: {m.label} ({m.gpus_per_replica} GPUs per replica x {m.replicas})\n"
              f"# base URL inside the cluster: http://{where}:{port}/v1  (model: {m.request_model_name})\n"
              f"# from outside: kubectl port-forward service/{service_name} {port}:{port}, then "
              f"http://127.0.0.1:{port}/v1\n")
    if m.nnodes > 1:
        header += ("# needs: the LeaderWorkerSet controller in the cluster (kind LeaderWorkerSet, "
                   "leaderworkerset.x-k8s.io/v1; install it first: https://lws.sigs.k8s.io/docs/installation/)\n")
    if k.cache_pvc:
        header += (f"# needs: the PersistentVolumeClaim {k.cache_pvc}{' (ReadWriteMany)' if m.nnodes > 1 else ''} in "
                   f"the namespace{f' {k.namespace}' if k.namespace else ''}: the model cache, mounted at {CACHE_DIR}; "
                   "create it first (the pods wait for it)\n")
    if m.api_key:
        header += (f"# API key: the server requires the key in Secret {k.api_key_secret} (key 'key'); create it first: "
                   f"kubectl create secret generic {k.api_key_secret} --from-literal=key=$(openssl rand -hex 24); "
                   f"the probe sends it from $USERTURN_API_KEY: export USERTURN_API_KEY=$(kubectl get secret "
                   f"{k.api_key_secret} -o jsonpath='{{.data.key}}' | base64 -d); --api-key-env USERTURN_API_KEY\n")
    return header + yaml.dump_all(docs, Dumper=_NoAliasDumper, sort_keys=False, width=1000)
