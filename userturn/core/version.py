"""The package version, from one source: the installed distribution's metadata (pyproject.toml `version`)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("userturn")
except PackageNotFoundError:  # a source tree on sys.path without an install
    __version__ = "0+unknown"
