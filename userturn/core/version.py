"""The package version, from one source: the installed distribution's metadata (pyproject.toml `version`)."""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("userturn")
except PackageNotFoundError:  # a source tree on sys.path without an install
    __version__ = "0+unknown"


def library_versions(names: Iterable[str]) -> str:
    """`name=version` of each installed distribution (`name=none` when absent), space-separated: part of a cache key,
    so a cache written under other library versions is never reused."""
    found = []
    for name in names:
        try:
            found.append(f"{name}={version(name)}")
        except PackageNotFoundError:
            found.append(f"{name}=none")
    return " ".join(found)
