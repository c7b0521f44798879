"""`launch(manifest)`: start a manifest's servers, wait until ready, hand out base URLs, tear everything down.

    with launch("manifests/quickstart-cpu.yaml") as server:
        server.base_urls   # one per replica (or the router), each ending in /v1
        server.model_name  # the `model` to send in requests
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from userturn.core.engine_traits import EngineTraits
from userturn.core.errors import UserError
from userturn.serve.commands import LaunchSpec, replica_specs, router_spec, server_argv
from userturn.serve.engines import engine_of
from userturn.serve.health import wait_until_ready
from userturn.serve.manifest import Manifest, load_manifest
from userturn.serve.process import ServerProcess, ServerStartError, pick_ports, start_error

Status = Callable[[str], None]
Launcher = Literal["local", "slurm"]
API_KEY_VAR = "USERTURN_API_KEY"  # generated keys live in USERTURN_API_KEY_<n> of this process (one per launch)
_launches = itertools.count(1)


def _stderr(msg: str) -> None:
    print(f"userturn: {msg}", file=sys.stderr, flush=True)


@dataclass
class Server:
    """What a running (or external) deployment exposes to clients."""

    manifest: Manifest
    base_urls: list[str]
    model_name: str
    log_paths: list[Path] = field(default_factory=list)
    replica_urls: list[str] = field(default_factory=list)
    api_key_env: str | None = None
    processes: list[ServerProcess] = field(default_factory=list)
    model_path: str | None = None  # what the server loaded (for the CPU engine: a local dir or GGUF file)
    slurm_job_id: str | None = None  # --launcher slurm: the job serving it
    watch: Callable[[], str | None] | None = None  # --launcher slurm: why the job stopped serving, None while it serves
    # --launcher slurm: the base URLs now (None while a requeued job has no endpoint); updates `base_urls` in place
    follow: Callable[[], list[str] | None] | None = None

    @property
    def base_url(self) -> str:
        return self.base_urls[0]

    @property
    def traits(self) -> EngineTraits:
        """What the server does with a request (seed, sampler defaults, stops, field names), for the probe."""
        return engine_of(self.manifest).engine_traits(self.manifest)

    def failure(self) -> str | None:
        """One line saying why the deployment stopped serving (a process or the SLURM job ended), else None."""
        for p in self.processes:
            if not p.alive:
                return str(start_error(f"{p.spec.name} exited with code {p.returncode()}", p.log_path, p.tail()))
        return self.watch() if self.watch is not None else None


def v1(url: str) -> str:
    """Normalise a root or /v1 URL to end in /v1."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def resolve_model(m: Manifest) -> str | None:
    """The model the engine loads, made local by its definition (a `pkg:` file for every engine that takes one; the
    CPU engine also fetches hub ids); None: the manifest's value as is."""
    return None if m.command else engine_of(m).resolve_model(m)


def check_installed(m: Manifest) -> None:
    """One-line UserError naming what to install when the engine (or its router) is missing."""
    if not m.command:
        engine_of(m).installed(m)


def server_api_key(m: Manifest) -> tuple[str, str] | None:
    """(env var, key) when the server requires an API key: `generate` puts a fresh key into $USERTURN_API_KEY_<n>
    of this process (one per launch), `env` takes the one in `api_key_env`."""
    if m.api_key is None:
        return None
    if m.api_key == "env":
        assert m.api_key_env is not None
        key = os.environ.get(m.api_key_env, "")
        if not key:
            raise UserError(f"{m.source or 'manifest'}: api_key: env: ${m.api_key_env} is unset or empty")
        return m.api_key_env, key
    key, var = secrets.token_urlsafe(32), f"{API_KEY_VAR}_{next(_launches)}"
    os.environ[var] = key
    return var, key


def dry_run_key(m: Manifest) -> str | None:
    """What --dry-run shows for the key (never a key itself)."""
    if m.api_key is None:
        return None
    return "<generated at launch>" if m.api_key == "generate" else f"<${m.api_key_env}>"


def plan(m: Manifest, *, model: str | None = None,
         api_key: str | None = None) -> tuple[list[LaunchSpec], LaunchSpec | None]:
    """The processes `launch` would start (ports resolved), without starting them: used by --dry-run."""
    where = str(m.source) if m.source else "manifest"
    ports = pick_ports(m.host, m.port, m.replicas, where=where)
    if m.router is not None:
        router_port = pick_ports(m.host, m.router.port, 1, where=f"{where}: router")[0]
        while m.router.port == 0 and router_port in ports:  # the OS may hand back a replica's port
            router_port = pick_ports(m.host, 0, 1)[0]
        ports.append(router_port)
    specs = replica_specs(m, ports[: m.replicas], model=model, api_key=api_key)
    router = router_spec(m, specs, ports[-1]) if m.router is not None else None
    return specs, router


DIST_ADDR_PLACEHOLDER = "<node0-host>:<dist-port>"


def node_plan(m: Manifest, *, api_key: str | None = None) -> list[LaunchSpec]:
    """One command per node of a multi-node replica (--dry-run): node 0 serves HTTP, the others join it. Node 0's
    address is the manifest's `dist_init_addr`, else a placeholder to replace; the HTTP port is `port`, else one
    free here (node 0 may be another machine, so a set port is not checked)."""
    port = m.port or pick_ports(m.host, 0, 1)[0]
    addr = m.dist_init_addr or DIST_ADDR_PLACEHOLDER
    return [LaunchSpec(name=f"{m.label}-node{rank}", host=m.host, port=port, env=dict(m.env), api_key=api_key,
                       health_paths=m.readiness_paths if rank == 0 else (),
                       argv=server_argv(m, port=port, api_key=api_key, node_rank=rank, dist_init_addr=addr))
            for rank in range(m.nnodes)]


@contextlib.contextmanager
def terminate_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into SystemExit (main thread only) so the `with` block tears servers down."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def launch(manifest: Manifest | str | Path, *, log_dir: str | Path | None = None, status: Status | None = _stderr,
           grace_s: float = 15.0, launcher: Launcher = "local") -> Iterator[Server]:
    """Start every replica (and the router), wait until all are ready, yield a `Server`; on exit, error, Ctrl-C or
    SIGTERM stop every process group. Startup failures raise `ServerStartError` with the last log lines.
    `launcher="slurm"` submits the manifest's sbatch script instead and cancels the job on the way out."""
    m = manifest if isinstance(manifest, Manifest) else load_manifest(manifest)
    say = status or (lambda _msg: None)
    if not engine_of(m).launches:
        assert m.base_url is not None
        url = v1(m.base_url)
        yield Server(manifest=m, base_urls=[url], model_name=m.request_model_name, replica_urls=[url],
                     api_key_env=m.api_key_env)
        return
    if launcher == "slurm":
        with terminate_on_sigterm(), _launch_slurm(m, log_dir, say) as server:
            yield server
        return
    check_installed(m)
    model = resolve_model(m)
    key = server_api_key(m)
    specs, router = plan(m, model=model, api_key=key[1] if key else None)
    logs = Path(log_dir) if log_dir else Path(tempfile.gettempdir()) / "userturn-serve"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    procs = [ServerProcess(s, logs / f"{s.name}-{s.port}-{stamp}.log") for s in specs]
    all_procs = list(procs)
    with terminate_on_sigterm():
        try:
            deadline = time.monotonic() + m.timeout_s
            for p in procs:
                say(f"starting {p.spec.name} on port {p.spec.port} (log: {p.log_path})")
                p.start()
            for p in procs:
                wait_until_ready(p, deadline, say)
            base_urls = replica_urls = [v1(s.url) for s in specs]
            if router is not None:
                rp = ServerProcess(router, logs / f"{router.name}-{router.port}-{stamp}.log")
                all_procs.append(rp)
                say(f"starting router on port {router.port} (log: {rp.log_path})")
                rp.start()
                wait_until_ready(rp, time.monotonic() + 120.0)
                base_urls = [v1(router.url)]
            yield Server(manifest=m, base_urls=base_urls, model_name=m.request_model_name,
                         log_paths=[p.log_path for p in all_procs], replica_urls=replica_urls,
                         api_key_env=key[0] if key else m.api_key_env, processes=all_procs,
                         model_path=model or m.resolve_path(m.model))
        finally:
            for p in reversed(all_procs):
                p.stop(grace_s)


@contextlib.contextmanager
def _launch_slurm(m: Manifest, log_dir: str | Path | None, say: Status) -> Iterator[Server]:
    from userturn.serve.slurm_launcher import StateWatch, slurm_job

    logs = Path(log_dir) if log_dir else Path.cwd() / "userturn-slurm"  # on the shared filesystem, not /tmp
    key = server_api_key(m)  # the job reads it from a file only the user can read
    with slurm_job(m, log_dir=logs.resolve(), say=say, api_key=key[1] if key else None) as (job, endpoints):
        urls = [v1(e.base_url) for e in endpoints]
        router = job.router_endpoint()
        first = router or endpoints[0]
        states = StateWatch(job)  # squeue with backoff while serving, too

        def watch() -> str | None:
            ended = states.ended()
            return None if ended is None else str(job.failure(f"stopped serving: {ended}"))

        server = Server(manifest=m, base_urls=[v1(router.base_url)] if router else urls, model_name=first.model,
                        log_paths=[job.log_path(t) for t in range(job.tasks)], replica_urls=urls,
                        api_key_env=key[0] if key else m.api_key_env, model_path=first.model_path,
                        slurm_job_id=job.job_id, watch=watch)

        def follow() -> list[str] | None:
            now = job.base_urls()
            if now is not None:
                server.base_urls[:] = [v1(u) for u in now]
                if not router:
                    server.replica_urls[:] = server.base_urls
            return None if now is None else list(server.base_urls)

        server.follow = follow
        yield server


__all__ = ["Server", "ServerStartError", "launch", "plan", "resolve_model"]
