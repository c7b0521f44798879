"""`userturn serve MANIFEST [--dry-run] [--emit slurm|k8s] [--out FILE]`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from userturn.cli.paths import Paths
from userturn.core.errors import UserError

if TYPE_CHECKING:
    from userturn.serve.commands import LaunchSpec
    from userturn.serve.launcher import Launcher, Server
    from userturn.serve.manifest import Manifest


NAME = "serve"
EXAMPLES = """\
  userturn serve quickstart-cpu
  userturn serve qwen3.5-9b --dry-run
  userturn serve manifests/qwen3.5-397b-a17b.yaml --emit slurm --out job.sbatch
  userturn serve qwen3.5-9b --launcher slurm"""
PATHS = Paths(outputs=(("out", "--out"),))
STOPPED = "the servers it started were stopped"  # `serve` writes no records


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The `serve` parser."""
    p = sub.add_parser(
        "serve",
        help="launch a model server from a manifest (SGLang, vLLM, CPU engine, llama.cpp) or emit a cluster job",
        description="Launch the servers a manifest describes, wait until they are ready, print their base URLs, and "
        "stop them all on Ctrl-C/SIGTERM. --dry-run prints the exact commands; --emit writes a SLURM or Kubernetes "
        "job instead.",
    )
    p.add_argument("manifest", metavar="MANIFEST", help="manifest YAML, or a shipped manifest by name (e.g. "
                   "quickstart-cpu; `userturn list` shows them)")
    p.add_argument("--dry-run", action="store_true", help="print the commands (shell-quoted, with env) and exit")
    p.add_argument("--emit", choices=["slurm", "k8s"], help="write an sbatch script or Kubernetes YAML instead")
    p.add_argument("--out", type=Path, help="file for --emit (default: stdout)")
    p.add_argument("--log-dir", type=Path, help="where server logs go (default: $TMPDIR/userturn-serve; with "
                   "--launcher slurm ./userturn-slurm, which the compute nodes must see)")
    p.add_argument("--launcher", choices=["local", "slurm"], default=None,
                   help="where a manifest's server runs: local processes (default) or a SLURM job (sbatch the "
                   "--emit slurm script, wait for its endpoint, scancel at the end)")
    return p


def run(args: argparse.Namespace) -> int:
    from userturn.serve.engines import engine_of
    from userturn.serve.k8s_manifests import render_k8s
    from userturn.serve.launcher import dry_run_key, node_plan, plan
    from userturn.serve.manifest import load_manifest
    from userturn.serve.slurm_script import render_slurm

    m = load_manifest(args.manifest)
    launcher: Launcher = args.launcher or "local"
    if args.emit and args.launcher:
        raise UserError("--emit writes the job; --launcher runs it: use one of them")
    if args.emit:
        text = render_slurm(m) if args.emit == "slurm" else render_k8s(m)
        if args.out:
            args.out.write_text(text, encoding="utf-8")
            print(f"wrote {args.out} ({args.emit})", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return 0
    if args.out:
        raise UserError("--out goes with --emit")
    if args.dry_run and launcher == "slurm":
        log = "%A_%a.log" if m.replicas > 1 else "%j.log"
        print(f"# --launcher slurm would run: sbatch --parsable --output=RUN_DIR/{log} --chdir=RUN_DIR "
              "--export=ALL,USERTURN_ENDPOINT_DIR=RUN_DIR/endpoints RUN_DIR/job.sbatch, with job.sbatch:")
        sys.stdout.write(render_slurm(m, secrets="redact"))
        return 0
    if args.dry_run:
        if not engine_of(m).launches:
            print(f"# engine external: nothing to launch; endpoint {m.base_url}")
            return 0
        if m.nnodes > 1:
            _print_nodes(m, node_plan(m, api_key=dry_run_key(m)))
            return 0
        try:  # the file a `pkg:` model names, as the launch would load it (nothing downloaded)
            model = None if m.command else engine_of(m).resolve_packaged(m)
        except UserError as exc:
            model = None
            print(f"# {exc}")
        specs, router = plan(m, model=model, api_key=dry_run_key(m))
        for s in [*specs, *([router] if router else [])]:
            print(f"# {s.name}: ready when {' then '.join(s.health_paths)} answer 200 on {s.url}")
            print(s.shell(placeholder=dry_run_key(m)))  # secrets redacted, the key a placeholder
        return 0
    try:
        return _serve(m, args.log_dir, launcher)
    except KeyboardInterrupt:
        what = "the slurm job was cancelled" if launcher == "slurm" else "every server was stopped"
        print(f"userturn: interrupted; {what}", file=sys.stderr)
        return 130


def _print_nodes(m: Manifest, nodes: list[LaunchSpec]) -> None:
    """A multi-node replica's commands, one line per node, with what to fill in where the manifest does not say."""
    from userturn.serve.launcher import DIST_ADDR_PLACEHOLDER, dry_run_key

    where = ("node 0 at " + m.dist_init_addr if m.dist_init_addr else
             f"{DIST_ADDR_PLACEHOLDER} replaced by node 0's address and a free port there (or set dist_init_addr)")
    print(f"# {m.label}: {m.nnodes} nodes; run each line on its own node, {where}")
    for s in nodes:
        if s.health_paths:
            print(f"# {s.name}: ready when {' then '.join(s.health_paths)} answer 200 on port {s.port} of node 0")
        else:
            print(f"# {s.name}: joins node 0 (no HTTP server of its own)")
        print(s.shell(placeholder=dry_run_key(m)))  # secrets redacted, the key a placeholder


def _serve(m: Manifest, log_dir: Path | None, launcher: Launcher = "local") -> int:
    from userturn.serve.engines import engine_of
    from userturn.serve.launcher import launch
    from userturn.serve.process import ServerStartError

    with launch(m, log_dir=log_dir, launcher=launcher) as server:
        if not engine_of(m).launches:
            print(f"external endpoint {server.base_url} (nothing launched)")
            return 0
        for url in server.base_urls:
            print(f"ready: {url}  model={server.model_name}", flush=True)
        job = f" (slurm job {server.slurm_job_id})" if server.slurm_job_id else ""
        print(f"serving{job}; Ctrl-C stops every server", file=sys.stderr, flush=True)
        serving = list(server.base_urls)
        while True:
            failure = server.failure()
            if failure:
                raise ServerStartError(failure)
            if server.follow is not None:
                _follow(server, serving)
            time.sleep(1.0)


def _follow(server: Server, serving: list[str]) -> None:
    """A requeued SLURM job comes back on another node or port: say so while it is gone, print its new URLs."""
    now = server.follow() if server.follow is not None else None
    if now is None and serving:
        print(f"userturn: slurm job {server.slurm_job_id} stopped serving at {' '.join(serving)} (requeued?); "
              "waiting for its new endpoint", file=sys.stderr, flush=True)
        serving.clear()
    elif now is not None and now != serving:
        for url in now:
            print(f"ready: {url}  model={server.model_name}  (slurm job {server.slurm_job_id} moved)", flush=True)
        serving[:] = now
