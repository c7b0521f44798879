"""``python -m userturn``: the command-line interface."""

import sys

from userturn.cli import entry

if __name__ == "__main__":
    sys.exit(entry())
