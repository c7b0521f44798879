"""`userturn serve MANIFEST [--dry-run] [--emit slurm|k8s] [--out FILE]`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from userturn.client.errors import UserError

if TYPE_CHECKING:
    from userturn.serve.manifest import Manifest


def register(sub: argparse._SubParsersAction) -> None:
    """Add `serve` to the `userturn` parser."""
    p = sub.add_parser(
        "serve",
        help="launch a model server from a manifest (SGLang, CPU engine, llama.cpp) or emit a cluster job",
        description="Launch the servers a manifest describes, wait until they are ready, print their base URLs, and "
        "stop them all on Ctrl-C/SIGTERM. --dry-run prints the exact commands; --emit writes a SLURM or Kubernetes "
        "job instead.",
    )
    p.add_argument("manifest", type=Path, help="manifest YAML (see manifests/)")
    p.add_argument("--dry-run", action="store_true", help="print the commands (shell-quoted, with env) and exit")
    p.add_argument("--emit", choices=["slurm", "k8s"], help="write an sbatch script or Kubernetes YAML instead")
    p.add_argument("--out", type=Path, help="file for --emit (default: stdout)")
    p.add_argument("--log-dir", type=Path, help="where server logs go (default: $TMPDIR/userturn-serve)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from userturn.serve.emit import render
    from userturn.serve.launcher import plan
    from userturn.serve.manifest import load_manifest

    m = load_manifest(args.manifest)
    if args.emit:
        text = render(m, args.emit)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text, encoding="utf-8")
            print(f"wrote {args.out} ({args.emit})", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return 0
    if args.out:
        raise UserError("--out goes with --emit")
    if args.dry_run:
        if m.engine == "external":
            print(f"# engine external: nothing to launch; endpoint {m.base_url}")
            return 0
        specs, router = plan(m)
        for s in [*specs, *([router] if router else [])]:
            print(f"# {s.name}: ready when {' then '.join(s.health_paths)} answer 200 on {s.url}")
            print(s.shell())
        return 0
    try:
        return _serve(m, args.log_dir)
    except KeyboardInterrupt:
        print("userturn: interrupted; every server was stopped", file=sys.stderr)
        return 130


def _serve(m: Manifest, log_dir: Path | None) -> int:
    from userturn.serve.launcher import launch
    from userturn.serve.process import ServerStartError

    with launch(m, log_dir=log_dir) as server:
        if m.engine == "external":
            print(f"external endpoint {server.base_url} (nothing launched)")
            return 0
        for url in server.base_urls:
            print(f"ready: {url}  model={server.model_name}", flush=True)
        print("serving; Ctrl-C stops every server", file=sys.stderr, flush=True)
        while True:
            dead = server.dead()
            if dead:
                p = dead[0]
                tail = " | ".join(p.tail())
                raise ServerStartError(f"{p.spec.name} exited with code {p.returncode()} (log: {p.log_path}); "
                                       f"last log lines: {tail}")
            time.sleep(1.0)
