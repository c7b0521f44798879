"""The command line, the package's only argparse code. `main`, `entry` and `build_parser` (`userturn.cli.app`) load
on first use, so importing one subcommand's module stays cheap."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from userturn.cli.app import build_parser, entry, main

__all__ = ["build_parser", "entry", "main"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from userturn.cli import app as module

        return getattr(module, name)
    raise AttributeError(f"module 'userturn.cli' has no attribute {name!r}")
