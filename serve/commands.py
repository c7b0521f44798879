"""Exact launch commands for each engine, built from a manifest (no side effects: dry-run and emitters use them)."""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass, field

from userturn.core.errors import UserError
from userturn.core.fingerprint import redacted_command, redacted_environment
from userturn.serve.engines import LaunchArgs, Target, engine_of
from userturn.serve.manifest import Manifest

ROUTER_MODULE = "sglang_router.launch_router"
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

    def shell(self, redact: bool = True, placeholder: str | None = None) -> str:
        """The command as one shell line: `K=V ... argv`, every part quoted; with `redact` (what a log and --dry-run
        get), the values of key, token, secret and password flags and variables and URL credentials as `[redacted]`,
        except a flag's `placeholder` (--dry-run's stand-in for the key, `launcher.dry_run_key`)."""
        env, argv = (redacted_environment(self.env), redacted_command(self.argv)) if redact else (self.env, self.argv)
        if placeholder:
            argv = [given if given == placeholder or given.endswith(f"={placeholder}") else shown
                    for given, shown in zip(self.argv, argv, strict=True)]
        shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        return f"{shown} {shlex.join(argv)}" if shown else shlex.join(argv)


def root_url(host: str, port: int) -> str:
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def custom_argv(m: Manifest, *, port: int | str, host: str | None = None, model: str | None = None,
                api_key: str | None = None) -> list[str]:
    """The manifest's own `command:` with {host} {port} {model} {served_model_name} {api_key} filled in."""
    values = {"host": host or m.host, "port": str(port), "model": model or m.resolve_path(m.model) or "",
              "served_model_name": m.request_model_name, "api_key": api_key or ""}
    return [PLACEHOLDER.sub(lambda found: values[found.group(1)], arg) for arg in m.command or []]


def server_argv(m: Manifest, *, port: int | str, host: str | None = None, python: str = sys.executable,
                model: str | None = None, threads: int | str | None = None, api_key: str | None = None,
                node_rank: int | str | None = None, dist_init_addr: str | None = None, target: Target = "local",
                image: str | None = None) -> list[str]:
    """The argv of one replica (one node of it, for multi-node sglang) of this manifest's server, as its engine's
    definition builds it (`userturn.serve.engines`); `target` says where it runs (local, slurm, k8s)."""
    if m.command:
        return custom_argv(m, port=port, host=host, model=model, api_key=api_key)
    return engine_of(m).argv(m, LaunchArgs(port=port, host=host, python=python, model=model, threads=threads,
                                           api_key=api_key, node_rank=node_rank, dist_init_addr=dist_init_addr,
                                           target=target, image=image))


def router_argv(m: Manifest, worker_urls: list[str], *, port: int | str, python: str = sys.executable) -> list[str]:
    """`python -m sglang_router.launch_router --worker-urls ...` in front of the replicas."""
    assert m.router is not None
    return [python, "-m", ROUTER_MODULE, "--worker-urls", *worker_urls, "--host", m.host, "--port", str(port),
            "--policy", m.router.policy, *m.router.extra_args]


def gpu_slices(m: Manifest, visible: str | None = None) -> list[str | None]:
    """CUDA_VISIBLE_DEVICES per replica (None: leave the inherited value alone)."""
    per = m.gpus_per_replica
    uses_gpu = engine_of(m).uses_gpus or m.gpus is not None
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
    if not engine_of(m).uses_gpus and not m.command and m.replicas > 1:  # CPU replicas share the cores
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
