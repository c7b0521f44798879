"""The API-key flags of the probe (`--api-key-env`, `--api-key-file`) and of the judges (`--judge-api-key-env`,
`--judge-api-key-file`), checked before anything loads or launches.

A key is read from an environment variable or a file, never from the command line: `--api-key` and
`--judge-api-key` exist only to be refused with the two ways that work, without echoing the value given.
A variable named explicitly must be set (else the run would go out keyless while the user thinks a key is sent);
the default variable (`OPENAI_API_KEY`) unset means no key, as local servers need none.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from userturn.core import defaults
from userturn.core.errors import UserError


class RefusedKeyFlag(argparse.Action):
    """A flag that would take a key on the command line: a usage error naming the two ways that work (the value,
    if any, is never shown)."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, env_flag: str, file_flag: str,
                 **kwargs: Any) -> None:
        self.env_flag, self.file_flag = env_flag, file_flag
        super().__init__(option_strings, dest, nargs="?", default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                         **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser.error(f"{option_string} is refused: a key on the command line ends up in shell history, process "
                     f"lists and logs. Export it in a variable and pass {self.env_flag} NAME (default "
                     f"${defaults.API_KEY_ENV}), or put it in a file and pass {self.file_flag} PATH")


def add_key_arguments(group: argparse._ArgumentGroup, *, judge: bool = False) -> None:
    """The key flags of the probe's endpoint, or (`judge`) of the judges (once, or once per --judge-model)."""
    prefix = "--judge-" if judge else "--"
    env_flag, file_flag = f"{prefix}api-key-env", f"{prefix}api-key-file"
    per_judge = "; once, or once per judge" if judge else ""
    many: dict[str, Any] = {"action": "append"} if judge else {}
    group.add_argument(env_flag, default=None, metavar="NAME", **many,
                       help=f"environment variable holding the API key, sent as a Bearer token (default "
                            f"{defaults.API_KEY_ENV}; unset means no key, as local servers need none; a variable named "
                            f"here must be set){per_judge}")
    group.add_argument(file_flag, default=None, metavar="PATH", **many,
                       help=f"file holding the API key, e.g. a mounted Kubernetes secret (one trailing newline is "
                            f"removed){per_judge}")
    group.add_argument(f"{prefix}api-key", action=RefusedKeyFlag, env_flag=env_flag, file_flag=file_flag)


def check_key_flags(args: argparse.Namespace) -> None:
    """Every key flag of the parsed command: a bad or unset variable, an unreadable file, or both kinds given is one
    line naming the variable or file (never a key)."""
    from userturn.client.http.keys import check_key_file, check_variable

    for prefix in ("", "judge_"):
        names: str | list[str] | None = getattr(args, f"{prefix}api_key_env", None)
        files: str | list[str] | None = getattr(args, f"{prefix}api_key_file", None)
        flag = "--" + prefix.replace("_", "-") + "api-key"
        if names and files:
            raise UserError(f"{flag}-env and {flag}-file both given: the key comes from one of them")
        for name in [names] if isinstance(names, str) else names or []:
            check_variable(name, f"{flag}-env", required=True)
        for path in [files] if isinstance(files, str) else files or []:
            check_key_file(path, f"{flag}-file")
