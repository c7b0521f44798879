"""`userturn list`: what can be named on the command line: shipped manifests and experiments, built-in datasets,
perturbations."""

from __future__ import annotations

import argparse
import sys

from userturn.cli.paths import Paths
from userturn.core.errors import UserError

NAME = "list"
EXAMPLES = """\
  userturn list
  userturn list manifests"""
PATHS = Paths()


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The `list` parser."""
    p = sub.add_parser("list", help="shipped manifests and experiments, built-in datasets, perturbations",
                       description="List what can be named on the command line from any directory: manifests "
                                   "(`userturn serve NAME`, `probe --manifest NAME`), experiments (`userturn run "
                                   "NAME`), datasets (`probe --dataset NAME[:split]`) and perturbations (`--perturb`).")
    p.add_argument("section", nargs="?", choices=list(SECTIONS), default=None, help="one section only (default: all)")
    return p


def manifest_rows() -> list[tuple[str, str]]:
    from userturn.core.shipped import shipped_dir, shipped_names
    from userturn.serve.manifest import load_manifest

    rows = []
    for name in shipped_names("manifests"):
        try:
            m = load_manifest(shipped_dir("manifests") / f"{name}.yaml")
        except UserError as exc:  # a broken shipped file is shown, not hidden
            rows.append((name, f"unreadable: {exc}"))
            continue
        gpus = f"{m.gpus_per_replica} GPU{'s' if m.gpus_per_replica != 1 else ''}" if m.gpus_per_replica else "CPU"
        rows.append((name, f"{m.engine}, {m.model or m.base_url or 'custom command'} ({gpus})"))
    return rows


def experiment_rows() -> list[tuple[str, str]]:
    from userturn.core.files import read_yaml_mapping
    from userturn.core.shipped import shipped_dir, shipped_names
    from userturn.orchestrate.experiment import is_posttrain_file, load_experiment
    from userturn.orchestrate.posttrain import load_posttrain

    rows = []
    for name in shipped_names("experiments"):
        path = shipped_dir("experiments") / f"{name}.yaml"
        try:
            if is_posttrain_file(read_yaml_mapping(path, "experiment file", "settings")):
                post, _ = load_posttrain(path)
                rows.append((name, f"[userturn posttrain] {post.description or post.base}"))
                continue
            exp, _ = load_experiment(path)
        except UserError as exc:
            rows.append((name, f"unreadable: {exc}"))
            continue
        rows.append((name, exp.description or f"{len(exp.models)} models x {len(exp.datasets)} datasets"))
    return rows


def dataset_rows() -> list[tuple[str, str]]:
    from userturn.client.data.loaders import BUILTINS

    return [(d.name, f"{d.summary} (splits: {', '.join(d.splits)}; default {d.default_split})")
            for d in BUILTINS.values()]


def perturbation_rows() -> list[tuple[str, str]]:
    from userturn.client.probe.perturb import SUMMARIES

    return list(SUMMARIES.items())


SECTIONS = {"manifests": manifest_rows, "experiments": experiment_rows, "datasets": dataset_rows,
            "perturbations": perturbation_rows}


def run(args: argparse.Namespace) -> int:
    chosen = [args.section] if args.section else list(SECTIONS)
    for index, section in enumerate(chosen):
        rows = SECTIONS[section]()
        width = max((len(name) for name, _ in rows), default=0)
        sys.stdout.write(("\n" if index else "") + f"{section}:\n")
        for name, text in rows:
            sys.stdout.write(f"  {name.ljust(width)}  {text}\n")
    return 0
