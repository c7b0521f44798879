"""The command line: the only argparse code of the package (`userturn COMMAND`, `python -m userturn`).

`main(argv)`, `entry()` and `build_parser()` live in `userturn.cli.app` and load on first use, so importing a
subcommand's module (say `userturn.cli.probe`) does not build the whole parser.
"""

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
