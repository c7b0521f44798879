"""The command line, the package's only argparse code. `main` and `build_parser` (`userturn.cli.app`) load on first
use, so importing one subcommand's module stays cheap; `entry`, the console script, is here, so that Ctrl-C at any
moment of start-up (the imports included) is one line and exit 130."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from userturn.cli.app import build_parser, main

__all__ = ["build_parser", "entry", "main"]


def entry() -> int:
    """The `userturn` console script. A command interrupted once running ends as `main` says; one interrupted while
    it starts (imports, parsing) has written nothing: one line, exit 130."""
    try:
        from userturn.cli.app import main

        return main()
    except KeyboardInterrupt:
        sys.stderr.write("userturn: interrupted while starting; nothing was written\n")
        return 130


def __getattr__(name: str) -> Any:
    if name in ("build_parser", "main"):
        from userturn.cli import app as module

        return getattr(module, name)
    raise AttributeError(f"module 'userturn.cli' has no attribute {name!r}")
