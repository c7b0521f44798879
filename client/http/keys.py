"""Where an endpoint's API key comes from: an environment variable (`--api-key-env NAME`, default `OPENAI_API_KEY`)
or a file (`--api-key-file PATH`, e.g. a mounted Kubernetes secret). Never the command line.

Every message names the source (`$NAME`, `key file PATH`), never the key. A name given where a variable name is
expected that is neither a variable name nor set is not echoed either: it is most likely a key pasted in its place.
"""

from __future__ import annotations

import os
import re

from userturn.core import defaults
from userturn.core.errors import UserError

VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
CONVENTIONAL = re.compile(r"[A-Z_][A-Z0-9_]*\Z")  # how environment variables are named: safe to echo
KEY_FILE_CAP = 64 << 10  # a key file larger than this is not a key file


def shown_variable(name: str, flag: str = "--api-key-env") -> str:
    """`$NAME` when `name` can be echoed (set in the environment, or named as variables are: upper case), else a
    description that does not repeat it (a lower-case unset word may be a key typed in its place)."""
    if name in os.environ or CONVENTIONAL.match(name):
        return f"${name}"
    return f"the variable {flag} names (not shown: it is not named like one and may be a key)"


def check_variable(name: str, flag: str = "--api-key-env", *, required: bool = False) -> None:
    """UserError (one line, never echoing `name` unless it is safe to) when `name` is not a variable name, or is
    `required` and unset or blank: a variable the user named explicitly must hold the key."""
    if not VARIABLE.match(name):
        raise UserError(f"{flag} takes the NAME of an environment variable that holds the key, and what was given is "
                        "not a variable name (not shown: it may be the key itself): export the key in a variable and "
                        "pass its name, or put it in a file and pass --api-key-file PATH")
    if required and not os.environ.get(name, "").strip():
        raise UserError(f"{shown_variable(name, flag)} is not set: no key sent; export it, or drop {flag} for a server "
                        "that needs no key")


def check_key_file(path: str, flag: str = "--api-key-file") -> None:
    """UserError naming `path` when it cannot be read as a key file (the key itself is never shown)."""
    read_key_file(path, flag)


def read_key_file(path: str, flag: str = "--api-key-file") -> str | None:
    """The key in the file at `path`, one trailing newline removed (as `kubectl create secret --from-file` and
    `echo KEY > file` leave it); None for an empty file. UserError naming `path` when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(KEY_FILE_CAP + 1)
    except IsADirectoryError:
        raise UserError(f"{flag} {path}: is a directory; name the file that holds the key") from None
    except OSError as exc:
        raise UserError(f"{flag} {path}: cannot read the key file ({exc.strerror or exc})") from None
    if len(data) > KEY_FILE_CAP:
        raise UserError(f"{flag} {path}: over {KEY_FILE_CAP >> 10} KiB, not a key file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{flag} {path}: not UTF-8 text, not a key file") from None
    text = text.removesuffix("\n").removesuffix("\r")
    return _valid(text, f"{flag} {path}", "one trailing newline is removed: check how the file is written") \
        if text else None


def _valid(key: str, source: str, stripped: str) -> str:
    if not key.isascii():
        raise UserError(f"{source} holds an API key with a non-ASCII character in it; check how it is set")
    if not key.isprintable():
        raise UserError(f"{source} holds an API key with a control character (e.g. a line break) inside it; only "
                        f"{stripped}")
    return key


def read_api_key(variable: str) -> str | None:
    """The key in $`variable`, surrounding whitespace stripped; None when unset or blank. UserError naming the
    variable (never the key) for a control or non-ASCII character inside it: sent in a header it would end the
    request head early or inject headers."""
    key = os.environ.get(variable, "").strip()
    if not key:
        return None
    return _valid(key, shown_variable(variable), "surrounding whitespace is stripped: check how the variable is set")


def read_key(variable: str = defaults.API_KEY_ENV, key_file: str | None = None) -> str | None:
    """The key an endpoint sends: from `key_file` when given, else from $`variable`; None for none."""
    return read_key_file(key_file) if key_file is not None else read_api_key(variable)


def key_origin(variable: str = defaults.API_KEY_ENV, key_file: str | None = None) -> str:
    """Where the key comes from, as messages name it: `$NAME` or `key file PATH`."""
    return f"key file {key_file}" if key_file is not None else shown_variable(variable)


def key_note(variable: str, key_file: str | None, sent: bool) -> str:
    """The end of a 401/403 message: where the refused key came from, or that none was sent and how to send one."""
    if sent:
        return f"(key from {key_origin(variable, key_file)})"
    return (f"(no key sent: {key_origin(variable, key_file)} is empty or not set; export the key in "
            f"${defaults.API_KEY_ENV}, or pass --api-key-env NAME or --api-key-file PATH)")


__all__ = ["check_key_file", "check_variable", "key_note", "key_origin", "read_api_key", "read_key",
           "read_key_file", "shown_variable"]
