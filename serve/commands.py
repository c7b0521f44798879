"""Exact launch commands for each engine, built from a manifest (no side effects: dry-run and emitters use them)."""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from userturn.serve.manifest import GPU_ENGINES, Manifest

from userturn.core.errors import UserError
from userturn.core.fingerprint import redacted_command, redacted_environment

SGLANG_MODULE = "sglang.launch_server"
ROUTER_MODULE = "sglang_router.launch_router"
CPU_ENGINE_MODULE = "userturn.serve.cpu_engine"
LLAMA_SERVER = "llama-server"
VLLM = "vllm"
ROUTER_HEALTH_PATHS = ("/health", "/v1/models")
PLACEHOLDER = re.compile(r"\{(host|port|model|served_model_name|api_key)\}")  # in a custom `command:`


@dataclass(frozen=True)
class LaunchSpec:
    """One process to start: argv, the env it adds, where it listens and how to tell it is ready."""

    name: str
    argv: list[str]
    host: str
    port: int
    health_paths: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    api_key: str | None = field(default=None, repr=False)  # sent with the readiness polls when the server wants one

    @property
    def url(self) -> str:
        """Root URL for a local client (0.0.0.0 / :: become loopback)."""
        return root_url(self.host, self.port)

    def shell(self, redact: bool = True) -> str:
        """The command as one shell line: `K=V ... argv`, every part quoted; with `redact` (what a log gets), the
        values of key, token, secret and password flags and variables and URL credentials as `[redacted]`."""
        env, argv = (redacted_environment(self.env), redacted_command(self.argv)) if redact else (self.env, self.argv)
        shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        return f"{shown} {shlex.join(argv)}" if shown else shlex.join(argv)


def root_url(host: str, port: int) -> str:
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def flag_args(*pairs: tuple[str, object]) -> list[str]:
    """`flag value` for each pair with a value; a flag alone for True; nothing for None or False."""
    out: list[str] = []
    for flag, value in pairs:
        if value is True:
            out.append(flag)
        elif value is not None and value is not False:
            out += [flag, str(value)]
    return out


def sglang_argv(m: Manifest, *, port: int | str, host: str | None = None, python: str = sys.executable,
                model: str | None = None, node_rank: int | str | None = None,
                dist_init_addr: str | None = None, api_key: str | None = None) -> list[str]:
    """`python -m sglang.launch_server ...` with the flag names of sglang's server_args.py."""
    argv = [python, "-m", SGLANG_MODULE, *flag_args(
        ("--model-path", model or m.resolve_path(m.model) or ""), ("--tokenizer-path", m.resolve_path(m.tokenizer)),
        ("--revision", m.revision), ("--host", host or m.host), ("--port", port), ("--tp-size", m.tp_size),
        ("--dp-size", m.dp_size), ("--mem-fraction-static", m.mem_fraction_static),
        ("--context-length", m.context_length), ("--dtype", m.dtype), ("--random-seed", m.seed),
        ("--chat-template", m.resolve_path(m.chat_template)), ("--reasoning-parser", m.reasoning_parser),
        ("--trust-remote-code", m.trust_remote_code), ("--load-format", m.load_format))]
    if m.nnodes > 1:
        addr = dist_init_addr or m.dist_init_addr
        if addr is None:
            raise UserError(f"{m.source or 'manifest'}: dist_init_addr: needed when nnodes > 1 (host:port of node 0)")
        argv += ["--nnodes", str(m.nnodes), "--node-rank", str(0 if node_rank is None else node_rank),
                 "--dist-init-addr", addr]
    argv += flag_args(("--served-model-name", m.request_model_name), ("--api-key", api_key))
    return argv + list(m.extra_args)


def vllm_argv(m: Manifest, *, port: int | str, host: str | None = None, model: str | None = None,
              api_key: str | None = None) -> list[str]:
    """`vllm serve MODEL ...` with the flag names of vLLM's engine args (one node: tp x dp GPUs).
    `--generation-config vllm`: sampling settings a request leaves out take vLLM's neutral defaults, not the
    model's generation_config.json (which would silently change e.g. top_p); `extra_args` can say otherwise."""
    return [VLLM, "serve", model or m.resolve_path(m.model) or "", *flag_args(
        ("--tokenizer", m.resolve_path(m.tokenizer)), ("--revision", m.revision), ("--host", host or m.host),
        ("--port", port), ("--tensor-parallel-size", m.tp_size), ("--data-parallel-size", m.dp_size),
        ("--gpu-memory-utilization", m.mem_fraction_static), ("--max-model-len", m.context_length),
        ("--dtype", m.dtype), ("--seed", m.seed), ("--chat-template", m.resolve_path(m.chat_template)),
        ("--reasoning-parser", m.reasoning_parser), ("--trust-remote-code", m.trust_remote_code),
        ("--load-format", m.load_format), ("--generation-config", "vllm"),
        ("--served-model-name", m.request_model_name), ("--api-key", api_key)), *m.extra_args]


def cpu_engine_argv(m: Manifest, *, port: int | str, host: str | None = None, python: str = sys.executable,
                    model: str | None = None, threads: int | str | None = None) -> list[str]:
    """`python -m userturn.serve.cpu_engine ...` (the embedded transformers engine)."""
    return [python, "-m", CPU_ENGINE_MODULE, *flag_args(
        ("--model", model or m.resolve_path(m.model) or ""), ("--tokenizer", m.resolve_path(m.tokenizer)),
        ("--revision", m.revision), ("--host", host or m.host), ("--port", port),
        ("--served-model-name", m.request_model_name), ("--dtype", m.dtype), ("--seed", m.seed),
        ("--context-length", m.context_length), ("--chat-template", m.resolve_path(m.chat_template)),
        ("--trust-remote-code", m.trust_remote_code), ("--threads", threads)), *m.extra_args]


def llamacpp_argv(m: Manifest, *, port: int | str, host: str | None = None, model: str | None = None,
                  api_key: str | None = None) -> list[str]:
    """`llama-server ...`: a .gguf path is `-m`, anything else a hub repo for `-hf` (repo[:quant])."""
    target = model or m.resolve_path(m.model) or ""
    return [LLAMA_SERVER, "-m" if target.endswith(".gguf") or Path(target).is_file() else "-hf", target, *flag_args(
        ("--host", host or m.host), ("--port", port), ("--alias", m.request_model_name), ("--jinja", True),
        ("--ctx-size", m.context_length), ("--seed", m.seed), ("--chat-template-file", m.resolve_path(m.chat_template)),
        ("--n-gpu-layers", 999 if m.gpus_per_replica > 0 else None), ("--api-key", api_key)), *m.extra_args]


def custom_argv(m: Manifest, *, port: int | str, host: str | None = None, model: str | None = None,
                api_key: str | None = None) -> list[str]:
    """The manifest's own `command:` with {host} {port} {model} {served_model_name} {api_key} filled in."""
    values = {"host": host or m.host, "port": str(port), "model": model or m.resolve_path(m.model) or "",
              "served_model_name": m.request_model_name, "api_key": api_key or ""}
    return [PLACEHOLDER.sub(lambda found: values[found.group(1)], arg) for arg in m.command or []]


def server_argv(m: Manifest, *, port: int | str, host: str | None = None, python: str = sys.executable,
                model: str | None = None, threads: int | str | None = None, api_key: str | None = None,
                node_rank: int | str | None = None, dist_init_addr: str | None = None) -> list[str]:
    """The argv of one replica (one node of it, for multi-node sglang) of this manifest's server."""
    if m.command:
        return custom_argv(m, port=port, host=host, model=model, api_key=api_key)
    if m.engine == "sglang":
        return sglang_argv(m, port=port, host=host, python=python, model=model, node_rank=node_rank,
                           dist_init_addr=dist_init_addr, api_key=api_key)
    if m.engine == "vllm":
        return vllm_argv(m, port=port, host=host, model=model, api_key=api_key)
    if m.engine == "transformers":
        return cpu_engine_argv(m, port=port, host=host, python=python, model=model, threads=threads)
    if m.engine == "llamacpp":
        return llamacpp_argv(m, port=port, host=host, model=model, api_key=api_key)
    raise UserError(f"{m.source or 'manifest'}: engine 'external' launches nothing")


def router_argv(m: Manifest, worker_urls: list[str], *, port: int | str, python: str = sys.executable) -> list[str]:
    """`python -m sglang_router.launch_router --worker-urls ...` in front of the replicas."""
    assert m.router is not None
    return [python, "-m", ROUTER_MODULE, "--worker-urls", *worker_urls, "--host", m.host, "--port", str(port),
            "--policy", m.router.policy, *m.router.extra_args]


def gpu_slices(m: Manifest, visible: str | None = None) -> list[str | None]:
    """CUDA_VISIBLE_DEVICES per replica (None: leave the inherited value alone)."""
    per = m.gpus_per_replica
    uses_gpu = m.engine in GPU_ENGINES or (m.command is not None and m.gpus is not None)
    if per == 0 or not uses_gpu or (m.replicas == 1 and m.gpu_ids is None):
        return [None] * m.replicas
    if m.gpu_ids is not None:
        pool = [str(i) for i in m.gpu_ids]
    elif visible:
        pool = [d.strip() for d in visible.split(",") if d.strip()]
    else:
        pool = [str(i) for i in range(per * m.replicas)]
    need = per * m.replicas
    if len(pool) < need:
        src = "gpu_ids" if m.gpu_ids is not None else "CUDA_VISIBLE_DEVICES"
        raise UserError(f"{m.source or 'manifest'}: replicas: {m.replicas} replicas x {per} GPUs need {need} GPUs, "
                        f"{src} lists {len(pool)}")
    return [",".join(pool[i * per:(i + 1) * per]) for i in range(m.replicas)]


def replica_specs(m: Manifest, ports: list[int], *, model: str | None = None, python: str = sys.executable,
                  cpu_count: int | None = None, api_key: str | None = None) -> list[LaunchSpec]:
    """One LaunchSpec per replica: distinct ports, distinct GPU slices, the manifest's env."""
    slices = gpu_slices(m, os.environ.get("CUDA_VISIBLE_DEVICES"))
    threads = None
    if m.engine == "transformers" and m.replicas > 1:
        threads = max(1, (cpu_count or os.cpu_count() or 1) // m.replicas)
    specs = []
    for i, (port, cuda) in enumerate(zip(ports, slices, strict=True)):
        env = dict(m.env)
        if cuda is not None:
            env["CUDA_VISIBLE_DEVICES"] = cuda
        argv = server_argv(m, port=port, python=python, model=model, threads=threads, api_key=api_key)
        specs.append(LaunchSpec(name=f"{m.label}-r{i}", argv=argv, host=m.host, port=port,
                                health_paths=m.readiness_paths, env=env, api_key=api_key))
    return specs


def router_spec(m: Manifest, replicas: list[LaunchSpec], port: int, *, python: str = sys.executable) -> LaunchSpec:
    argv = router_argv(m, [s.url for s in replicas], port=port, python=python)
    return LaunchSpec(name=f"{m.label}-router", argv=argv, host=m.host, port=port, health_paths=ROUTER_HEALTH_PATHS,
                      env=dict(m.env))
