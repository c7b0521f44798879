"""Serving manifests: one YAML file per model, validated by pydantic (unknown keys are errors)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from userturn.core.errors import UserError
from userturn.core.files import read_yaml_mapping
from userturn.core.options import Options
from userturn.core.shipped import resolve_named
from userturn.serve.engines import ENGINES, engine_of
from userturn.serve.engines.base import engines_with

# Readiness routes of a custom `command:` (an engine's own are in its definition, userturn.serve.engines).
CUSTOM_HEALTH_PATHS: tuple[str, ...] = ("/v1/models",)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ProbeDefaults(Options):
    """Probe-side settings for this model family, so `userturn probe --manifest M` needs no other flags: any option
    (`userturn.core.options.Options`; `tokenizer` and `chat_template` relative to the manifest) below the flags and
    the experiment's, plus what the served model needs on every request."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    stop: list[str] = Field(default_factory=list, description="stop strings for the raw user-turn completion")
    stop_token_ids: list[int] = Field(default_factory=list, description="stop token ids (sent when supported)")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="merged into every request body")


class RouterConfig(_Strict):
    """An sglang-router in front of the replicas (one URL, cache-aware balancing)."""

    kind: Literal["sglang"] = "sglang"
    port: int = Field(default=0, ge=0, le=65535)
    policy: Literal["cache_aware", "round_robin", "random", "power_of_two"] = "cache_aware"
    extra_args: list[str] = Field(default_factory=list)


class SlurmConfig(_Strict):
    """Settings for `--emit slurm` and `--launcher slurm` (None: a default per engine, see serve/slurm_script.py)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str = "04:00:00"
    cpus_per_task: int | None = Field(default=None, ge=1, description="default: 2 (CPU engine), 4 per GPU")
    mem: str | None = Field(default=None, description="--mem; default: 8G (CPU engine), 64G per GPU; '0' = whole node")
    python: str | None = Field(default=None, description="Python on the nodes; default: $USERTURN_PYTHON, else "
                               "python3 on the job's PATH (--launcher slurm: the launching interpreter)")
    setup: list[str] = Field(default_factory=list, description="shell lines run before the server (module load ...)")
    sbatch_args: list[str] = Field(default_factory=list, description="extra '#SBATCH' options, e.g. --exclusive")
    dist_port: int = Field(default=0, ge=0, le=65535,
                           description="port for --dist-init-addr on the first node; 0 picks a free one at run time")
    endpoint_dir: str | None = Field(default=None, description="shared folder the job writes its endpoint JSON to; "
                                     "default: $USERTURN_ENDPOINT_DIR, else userturn-endpoints/ in the submit dir")
    hf_home: str | None = Field(default=None, description="HF_HOME in the job (the hub cache on the nodes: a shared "
                                "or scratch folder); default: the job's own environment")
    hf_hub_offline: bool | None = Field(default=None, description="HF_HUB_OFFLINE in the job (true: weights must be "
                                        "in the cache already); default: the job's own environment")
    queue_timeout: float | None = Field(default=None, gt=0, description="--launcher slurm: seconds a job may wait "
                                        "in the queue (startup_timeout counts from when it runs); default: no limit")


class K8sConfig(_Strict):
    """Settings for `--emit k8s`."""

    image: str | None = Field(default=None, description="container image; default lmsysorg/sglang for engine "
                              "sglang, vllm/vllm-openai for engine vllm, required for every other engine")
    namespace: str | None = None
    hf_token_secret: str = Field(default="hf-token", description="Secret holding HF_TOKEN (key 'token'; optional)")
    api_key_secret: str = Field(default="userturn-api-key", description="with api_key: the Secret holding the "
                                "server's key (key 'key'; you create it, the pods wait for it)")
    cache_pvc: str | None = Field(default=None, description="PVC for the model cache at /root/.cache/huggingface "
                                  "(ReadWriteMany for multi-node); default for one node: an emptyDir")
    cache_host_path: str | None = Field(default=None, description="a hostPath on every node with the hub cache "
                                        "pre-staged (mounted at /root/.cache/huggingface; the pods run offline)")

    shm_size: str = "32Gi"
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] | None = Field(
        default=None, description="pod tolerations; default for GPU pods: tolerate the nvidia.com/gpu taint")
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    cpu: str | None = None
    memory: str | None = None

    @model_validator(mode="after")
    def _one_cache(self) -> K8sConfig:
        if self.cache_pvc and self.cache_host_path:
            raise ValueError("cache_pvc and cache_host_path: set one of them")
        if self.cache_host_path is not None and not self.cache_host_path.startswith("/"):
            raise ValueError(f"cache_host_path {self.cache_host_path!r} must be an absolute path on the nodes")
        return self


class ClusterConfig(_Strict):
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    k8s: K8sConfig = Field(default_factory=K8sConfig)


class Manifest(_Strict):
    """How to serve one model (or reach one endpoint), plus its probe defaults."""

    name: str | None = Field(default=None, description="label; defaults to the file name without .yaml")
    engine: str = Field(description="; ".join(f"{kind}: {e.summary}" for kind, e in ENGINES.items()))
    model: str | None = Field(default=None, description="model path, hub id, or GGUF file (path or "
                              "pkg:PACKAGE/file.gguf inside an installed package)")
    revision: str | None = None
    tokenizer: str | None = Field(default=None, description="tokenizer path if it differs from the model")
    served_model_name: str | None = Field(default=None, description="name sent in requests; defaults to `model`")
    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535, description="0 picks a free port")
    tp_size: int = Field(default=1, ge=1)
    dp_size: int = Field(default=1, ge=1)
    nnodes: int = Field(default=1, ge=1)
    dist_init_addr: str | None = Field(default=None, description="host:port of node 0 for multi-node")
    gpus: int | None = Field(default=None, ge=0, description="GPUs one replica needs across its nodes")
    gpu_ids: list[int] | None = Field(default=None, description="GPUs to slice among replicas (default: 0..N-1)")
    mem_fraction_static: float | None = Field(default=None, gt=0, lt=1, description="GPU memory share: sglang "
                                              "--mem-fraction-static, vllm --gpu-memory-utilization")
    context_length: int | None = Field(default=None, ge=1)
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] = "auto"
    seed: int | None = None
    chat_template: str | None = Field(default=None, description="server-side chat template override (file)")
    reasoning_parser: str | None = None
    trust_remote_code: bool = False
    load_format: str | None = Field(default=None, description="e.g. sglang's 'dummy' (random weights)")
    deterministic: bool = Field(default=False, description="sglang: --enable-deterministic-inference, so a "
                                "request's seed reaches the sampler (SGLang ignores it otherwise); slower")
    binary: str | None = Field(default=None, description="the server executable (llamacpp: llama-server, vllm: "
                               "vllm); default: found on PATH here and in a SLURM job, the image's own in a pod")
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    startup_timeout: float | None = Field(default=None, gt=0, description="seconds; default per engine")
    replicas: int = Field(default=1, ge=1)
    router: RouterConfig | None = None
    command: Annotated[list[str] | None, Field(min_length=1)] = Field(
        default=None,
        description="custom launch command (argv) for any OpenAI-compatible server, e.g. vLLM; placeholders "
        "{host} {port} {model} {served_model_name} are filled in",
    )
    health_paths: list[str] | None = Field(default=None, description="readiness routes polled in order")
    base_url: str | None = Field(default=None, description="engine external: the endpoint (…/v1)")
    api_key_env: str | None = Field(default=None, description="env var holding the API key")
    api_key: Literal["generate", "env"] | None = Field(
        default=None, description="the key a launched server requires, which the probe sends: 'generate' (a new "
        "random key per launch; the default for engines that take a key, unless a router or a custom command "
        "without {api_key} serves it), 'env' (the key in api_key_env), or 'none' (no key: anyone who reaches the "
        "port may use the server); a custom command takes it as {api_key}")
    probe: ProbeDefaults = Field(default_factory=ProbeDefaults)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    source: Path | None = Field(default=None, exclude=True, description="the YAML file (set by load_manifest)")

    @model_validator(mode="before")
    @classmethod
    def _default_key(cls, data: Any) -> Any:
        """Launched servers require a generated key unless the manifest says `api_key: none` (or cannot take one)."""
        if not isinstance(data, dict):
            return data
        if data.get("api_key") == "none":
            return {**data, "api_key": None}
        engine = ENGINES.get(data.get("engine"))  # type: ignore[arg-type]
        command = data.get("command")
        takes_key = (engine is not None and engine.launches and engine.takes_api_key and data.get("router") is None
                     and (not command or any("{api_key}" in str(a) for a in command)))
        if "api_key" not in data and takes_key:
            return {**data, "api_key": "generate"}
        return data

    @field_validator("health_paths")
    @classmethod
    def _paths_start_with_slash(cls, v: list[str] | None) -> list[str] | None:
        for p in v or []:
            if not p.startswith("/"):
                raise ValueError(f"health path {p!r} must start with '/'")
        return v

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, v: str) -> str:
        if v not in ENGINES:
            raise ValueError(f"unknown engine {v!r}: one of {', '.join(repr(k) for k in ENGINES)}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        e = self.engine
        definition = engine_of(self)
        if not definition.launches:
            if not self.base_url:
                raise ValueError(f"engine '{e}' needs base_url")
        else:
            if self.base_url:
                unlaunched = ", ".join(repr(kind) for kind, d in ENGINES.items() if not d.launches)
                raise ValueError(f"base_url is only for engine {unlaunched}")
            if not self.model and not self.command:
                raise ValueError(f"engine '{e}' needs model (a path or hub id)")
        if self.api_key == "env" and not self.api_key_env:
            raise ValueError("api_key: env needs api_key_env (the variable that holds the key)")
        if self.api_key is not None and self.command and not any("{api_key}" in a for a in self.command):
            raise ValueError("api_key: the custom command must take the key as {api_key}")
        if self.api_key is not None and self.router is not None:
            raise ValueError("api_key with a router is not supported yet (the router would need the key too)")
        definition.check(self)
        if self.router is not None and not definition.has_router:
            raise ValueError(f"router is only supported with {engines_with('has_router')}")
        if self.nnodes > 1 and self.replicas > 1:
            raise ValueError("multi-node (nnodes > 1) serves one replica: use replicas: 1")
        if self.gpus and self.gpus < self.tp_size:
            raise ValueError(f"gpus ({self.gpus}) is smaller than tp_size ({self.tp_size})")
        if self.gpus is not None and self.gpus % self.nnodes:
            raise ValueError(f"gpus ({self.gpus}) must split evenly over nnodes ({self.nnodes})")
        return self

    # ----- derived values -----

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        return self.source.stem if self.source else (self.served_model_name or self.model or "model")

    @property
    def request_model_name(self) -> str:
        """The `model` to send in requests."""
        return self.served_model_name or self.model or self.label

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one replica uses across all its nodes (0 for the CPU engine)."""
        if self.gpus is not None:
            return self.gpus
        if engine_of(self).uses_gpus:
            return self.tp_size * self.dp_size
        return 0

    @property
    def gpus_per_node(self) -> int:
        return self.gpus_per_replica // self.nnodes

    @property
    def timeout_s(self) -> float:
        return self.startup_timeout or engine_of(self).startup_timeout_s

    @property
    def readiness_paths(self) -> tuple[str, ...]:
        if self.health_paths:
            return tuple(self.health_paths)
        return CUSTOM_HEALTH_PATHS if self.command else engine_of(self).health_paths

    def resolve_path(self, value: str | None) -> str | None:
        """A value written as a relative path (./x, ../x) is relative to the manifest file; others pass as is."""
        if value is None:
            return None
        if value.startswith("~"):
            return str(Path(value).expanduser())
        if value.startswith(("./", "../")) and self.source is not None:
            return str((self.source.parent / value).resolve())
        return value


def format_validation_error(path: Path | str, exc: ValidationError) -> str:
    """One line: `file: key.path: message` (first error, with a count of the others)."""
    errors = exc.errors()
    first = errors[0]
    loc = ".".join(str(p) for p in first["loc"] if not str(p).startswith("function-")) or "(top level)"
    msg = "unknown key" if first["type"] == "extra_forbidden" else first["msg"].removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{path}: {loc}: {msg}{more}"


def parse_manifest(data: Any, path: Path | str = "<manifest>") -> Manifest:
    """Validate already-parsed YAML data; errors become one-line UserErrors naming the file and key."""
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of keys at the top level, got {type(data).__name__}")
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(path, exc)) from None
    if isinstance(path, Path):
        manifest.source = path
    return manifest


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a manifest YAML file, or a shipped manifest by name (`quickstart-cpu`); every problem is a
    one-line UserError naming the file."""
    p = resolve_named(path, "manifests")
    return parse_manifest(read_yaml_mapping(p, "manifest"), p)
