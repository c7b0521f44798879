"""Manifests and experiments shipped with userturn (the data packages `userturn.manifests`, `userturn.experiments`),
usable by name from any directory: `quickstart-cpu`, `quickstart-cpu.yaml` and `manifests/quickstart-cpu.yaml` name
the same manifest when no such path exists.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Literal

from userturn.core.errors import UserError

Kind = Literal["manifests", "experiments"]
NOUN: dict[Kind, str] = {"manifests": "manifest", "experiments": "experiment file"}


def shipped_dir(kind: Kind) -> Path:
    """The installed folder of shipped `kind` files (inside the wheel, or the checkout for an editable install)."""
    return Path(str(importlib.resources.files(f"userturn.{kind}")))


def shipped_names(kind: Kind) -> list[str]:
    """The names of the shipped files of `kind`, sorted (file names without `.yaml`)."""
    return sorted(p.stem for p in shipped_dir(kind).glob("*.yaml"))


def resolve_named(value: str | Path, kind: Kind) -> Path:
    """`value` as a path when it exists; else the shipped file it names (`NAME`, `NAME.yaml`, `kind/NAME.yaml`);
    else a UserError that lists the shipped names."""
    path = Path(value)
    if path.exists():
        return path
    name = path.name.removesuffix(".yaml").removesuffix(".yml")
    if path.parent in (Path("."), Path(kind)) and name:
        candidate = shipped_dir(kind) / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    raise UserError(f"{value}: {NOUN[kind]} not found (no such file; shipped {kind}: "
                    f"{', '.join(shipped_names(kind))}; `userturn list` shows them)")
