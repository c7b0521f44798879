"""``python -m userturn``: the command-line interface."""

import sys

from userturn.client.cli import entry

if __name__ == "__main__":
    sys.exit(entry())
