"""Kubernetes output: every document validates against the real schemas (kubernetes-validate, strict), and the
pods can start on a real cluster (image, Recreate, tolerations, probes, cache volume, HF token)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from userturn.cli import main
from userturn.core.errors import UserError
from userturn.serve.k8s_manifests import render_k8s
from userturn.serve.manifest import load_manifest, parse_manifest

kubernetes_validate = pytest.importorskip("kubernetes_validate")

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
K8S_VERSION = "1.33.0"
MULTI = {
    "engine": "sglang", "model": "Qwen/Qwen3.5-397B-A17B", "served_model_name": "big", "tp_size": 16, "nnodes": 2,
    "gpus": 16, "name": "Big Model", "env": {"NCCL_DEBUG": "WARN"},
    "cluster": {"slurm": {"dist_port": 29500},
                "k8s": {"image": "lmsysorg/sglang:v0.5", "namespace": "ml", "hf_token_secret": "hf",
                        "cache_pvc": "hf-cache"}},
}
# The LeaderWorkerSet fields we emit, as in the CRD (leaderworkerset.x-k8s.io/v1): top level and the template;
# the pod templates inside are validated with the real PodTemplateSpec schema below.
LWS_SPEC_KEYS = {"replicas", "leaderWorkerTemplate", "rolloutStrategy", "startupPolicy", "networkConfig"}
LWS_TEMPLATE_KEYS = {"leaderTemplate", "workerTemplate", "size", "restartPolicy", "subGroupPolicy",
                     "volumeClaimTemplates"}
LWS_RESTART_POLICIES = {"RecreateGroupOnPodRestart", "None", "Default"}


def validate_pod_template(template: dict[str, Any], where: str) -> None:
    """A pod template (metadata + spec) against the strict v1 PodTemplateSpec schema, wrapped in a PodTemplate."""
    doc = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        raise AssertionError(f"{where}: {exc.message} at {list(exc.path)}") from None


def validate_lws(doc: dict[str, Any]) -> None:
    assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}
    spec = doc["spec"]
    assert set(spec) <= LWS_SPEC_KEYS and isinstance(spec["replicas"], int) and spec["replicas"] >= 0
    tpl = spec["leaderWorkerTemplate"]
    assert set(tpl) <= LWS_TEMPLATE_KEYS and "workerTemplate" in tpl
    assert isinstance(tpl["size"], int) and tpl["size"] >= 1 and tpl["restartPolicy"] in LWS_RESTART_POLICIES
    validate_pod_template(tpl["leaderTemplate"], "leaderTemplate")
    validate_pod_template(tpl["workerTemplate"], "workerTemplate")


def validate_all(text: str) -> list[dict[str, Any]]:
    docs = list(yaml.safe_load_all(text))
    assert docs
    for doc in docs:
        if doc["kind"] == "LeaderWorkerSet":
            validate_lws(doc)
            continue
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{doc['kind']}: {exc.message} at {list(exc.path)}") from None
    return docs


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    if doc["kind"] == "Deployment":
        return doc["spec"]["template"]["spec"]["containers"]
    tpl = doc["spec"]["leaderWorkerTemplate"]
    return [*tpl["leaderTemplate"]["spec"]["containers"], *tpl["workerTemplate"]["spec"]["containers"]]


def test_validator_catches_a_broken_document() -> None:
    """The check can fail: an unknown key and a wrong type are rejected in strict mode."""
    text = render_k8s(load_manifest(MANIFESTS / "qwen3.5-9b.yaml"))
    docs = list(yaml.safe_load_all(text))
    docs[0]["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["timeout"] = 5
    with pytest.raises(AssertionError, match="timeout"):
        validate_all(yaml.safe_dump_all(docs))
    docs = list(yaml.safe_load_all(text))
    docs[0]["spec"]["template"]["spec"]["tolerations"] = {"key": "x"}
    with pytest.raises(AssertionError):
        validate_all(yaml.safe_dump_all(docs))


@pytest.mark.parametrize("path", sorted(MANIFESTS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_manifest_validates(path: Path) -> None:
    m = load_manifest(path)
    if m.engine not in ("sglang", "vllm") and not m.cluster.k8s.image:
        m = m.model_copy(update={"cluster": m.cluster.model_copy(update={
            "k8s": m.cluster.k8s.model_copy(update={"image": "registry.example/userturn-cpu:1"})})})
    validate_all(render_k8s(m))


def test_gpu_deployment_starts_on_a_real_cluster() -> None:
    dep, svc = validate_all(render_k8s(load_manifest(MANIFESTS / "qwen3.5-27b.yaml")))
    assert dep["spec"]["strategy"] == {"type": "Recreate"}  # rolling updates would need spare GPUs
    pod = dep["spec"]["template"]["spec"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    c = pod["containers"][0]
    assert c["image"] == "lmsysorg/sglang:v0.5.23"  # pinned to the version its flags were checked on
    assert c["command"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": 30000}
    assert c["livenessProbe"]["timeoutSeconds"] >= 5 and c["readinessProbe"]["timeoutSeconds"] >= 5
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] == 1800  # startup_timeout
    assert {"name": "model-cache", "mountPath": "/root/.cache/huggingface"} in c["volumeMounts"]
    assert {"name": "model-cache", "emptyDir": {}} in pod["volumes"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token",
                                                               "optional": True}}} in c["env"]
    assert svc["metadata"]["name"] == dep["metadata"]["name"] and svc["spec"]["selector"] == \
        dep["spec"]["selector"]["matchLabels"]


def test_multinode_without_a_shared_cache_is_refused() -> None:
    data = {**MULTI, "cluster": {"k8s": {"image": "lmsysorg/sglang:v0.5"}}}
    with pytest.raises(UserError) as info:
        render_k8s(parse_manifest(data))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("manifest: cluster.k8s: nnodes 2 needs a shared model cache: add "
                                              "cache_pvc: NAME (a ReadWriteMany PersistentVolumeClaim) or "
                                              "cache_host_path: /DIR")


def test_shipped_397b_keeps_its_weights_on_a_pvc() -> None:
    lws, _svc = validate_all(render_k8s(load_manifest(MANIFESTS / "qwen3.5-397b-a17b.yaml")))
    tpl = lws["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        volumes = {v["name"]: v for v in tpl[role]["spec"]["volumes"]}
        assert volumes["model-cache"] == {"name": "model-cache", "persistentVolumeClaim": {"claimName": "hf-cache"}}
    assert "emptyDir: {}" not in render_k8s(load_manifest(MANIFESTS / "qwen3.5-397b-a17b.yaml"))


def test_prestaged_host_path_runs_offline() -> None:
    data = {**MULTI, "cluster": {"k8s": {"image": "lmsysorg/sglang:v0.5", "cache_host_path": "/mnt/hf"}}}
    lws, _svc = validate_all(render_k8s(parse_manifest(data)))
    leader, worker = containers(lws)
    pod = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert {"name": "model-cache", "hostPath": {"path": "/mnt/hf", "type": "Directory"}} in pod["volumes"]
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in leader["env"] and {"name": "HF_HUB_OFFLINE", "value": "1"} \
        in worker["env"]
    for bad, needle in (({"cache_pvc": "a", "cache_host_path": "/b"}, "set one of them"),
                        ({"cache_host_path": "rel/dir"}, "must be an absolute path")):
        with pytest.raises(UserError, match=needle):
            parse_manifest({**MULTI, "cluster": {"k8s": bad}})


def test_api_key_comes_from_a_secret() -> None:
    m = parse_manifest({"engine": "vllm", "model": "x", "api_key": "generate",
                        "cluster": {"k8s": {"api_key_secret": "my-key"}}})
    text = render_k8s(m)
    dep, _svc = validate_all(text)
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert "--api-key=$(USERTURN_API_KEY)" in c["command"]  # Kubernetes expands it; one word, never a flag
    assert {"name": "USERTURN_API_KEY", "valueFrom": {"secretKeyRef": {"name": "my-key", "key": "key"}}} in c["env"]
    assert "kubectl create secret generic my-key --from-literal=key=" in text.splitlines()[3]
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"  # no key needed there


def test_vllm_deployment_runs_vllm_serve_in_the_vllm_image() -> None:
    dep, _svc = validate_all(render_k8s(load_manifest(MANIFESTS / "qwen3.5-9b-vllm.yaml")))
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "vllm/vllm-openai:v0.33.0"
    assert c["command"][:3] == ["vllm", "serve", "Qwen/Qwen3.5-9B"]
    assert c["command"][c["command"].index("--port") + 1] == "30000"
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": 30000}
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}


def test_multinode_leaderworkerset_service_is_named_apart() -> None:
    """The LWS controller creates a headless Service under the LWS's own name: ours must not take it."""
    lws, svc = validate_all(render_k8s(parse_manifest(MULTI)))
    assert lws["kind"] == "LeaderWorkerSet" and lws["metadata"]["namespace"] == "ml"
    assert svc["metadata"]["name"] == f"{lws['metadata']['name']}-leader"
    assert svc["spec"]["selector"]["role"] == "leader"
    tpl = lws["spec"]["leaderWorkerTemplate"]
    assert tpl["size"] == 2 and tpl["leaderTemplate"]["metadata"]["labels"]["role"] == "leader"
    leader, worker = containers(lws)
    for c, rank in ((leader, "0"), (worker, "$(LWS_WORKER_INDEX)")):
        cmd = c["command"]
        assert cmd[cmd.index("--node-rank") + 1] == rank
        assert cmd[cmd.index("--dist-init-addr") + 1] == "$(LWS_LEADER_ADDRESS):29500"
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 8 and c["image"] == "lmsysorg/sglang:v0.5"
        assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token", "optional": True}}
                } in c["env"]
    assert "readinessProbe" in leader and "readinessProbe" not in worker
    volumes = tpl["workerTemplate"]["spec"]["volumes"]
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "hf-cache"}} in volumes


@pytest.mark.parametrize("fields", [{"engine": "transformers", "model": "m"}, {"engine": "llamacpp", "model": "m.gguf"},
                                    {"engine": "sglang", "model": "m", "command": ["vllm", "serve", "{model}"]}])
def test_non_sglang_needs_an_explicit_image(fields: dict[str, Any], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(fields))
    assert main(["serve", str(path), "--emit", "k8s"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{path}: cluster.k8s.image:" in err
    with_image = parse_manifest({**fields, "cluster": {"k8s": {"image": "me/cpu:1"}}})
    dep, _ = validate_all(render_k8s(with_image))
    assert containers(dep)[0]["image"] == "me/cpu:1"


def test_cpu_deployment_keeps_rolling_updates_and_no_gpu_toleration() -> None:
    m = parse_manifest({"engine": "transformers", "model": "m", "cluster": {"k8s": {
        "image": "me/cpu:1", "tolerations": [{"key": "spot", "operator": "Exists"}]}}})
    dep, _ = validate_all(render_k8s(m))
    assert "strategy" not in dep["spec"]
    assert dep["spec"]["template"]["spec"]["tolerations"] == [{"key": "spot", "operator": "Exists"}]
    assert containers(dep)[0]["readinessProbe"]["httpGet"]["path"] == "/health"


def test_router_deployment_discovers_the_serving_pods() -> None:
    m = parse_manifest({"engine": "sglang", "model": "m", "name": "rt", "replicas": 3,
                        "router": {"policy": "round_robin"}, "cluster": {"k8s": {"namespace": "ml"}}})
    text = render_k8s(m)
    docs = validate_all(text)
    assert [d["kind"] for d in docs] == ["Deployment", "Service", "ServiceAccount", "Role", "RoleBinding",
                                         "Deployment", "Service"]
    workers, _, _, role, binding, router, router_svc = docs
    assert workers["spec"]["replicas"] == 3 and router["spec"]["replicas"] == 1
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    assert binding["subjects"][0] == {"kind": "ServiceAccount", "name": "userturn-rt-router", "namespace": "ml"}
    pod = router["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "userturn-rt-router"
    cmd = pod["containers"][0]["command"]
    assert cmd[:3] == ["python3", "-m", "sglang_router.launch_router"] and "--service-discovery" in cmd
    # the selector matches the serving pods and not the router's own
    selector = dict(cmd[cmd.index("--selector") + 1].split("=", 1) for _ in [0])
    assert selector.items() <= workers["spec"]["template"]["metadata"]["labels"].items()
    assert not selector.items() <= router["spec"]["template"]["metadata"]["labels"].items()
    assert cmd[cmd.index("--policy") + 1] == "round_robin"
    assert router_svc["spec"]["selector"] == router["spec"]["template"]["metadata"]["labels"]
    assert "http://userturn-rt-router.ml:30000/v1" in text.splitlines()[1]


def test_external_cannot_be_emitted() -> None:
    with pytest.raises(UserError, match="nothing to deploy"):
        render_k8s(parse_manifest({"engine": "external", "base_url": "http://h/v1"}))
