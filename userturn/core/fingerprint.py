"""The configuration of a generation, its fingerprint, and the resume check.

`generation_config`: what shapes a generation (what is probed, where the assistant turn comes from, the prompt's
identity: template, its variables, stops, extra body; the engine, its server's sampler defaults and whether it
honours the seed) plus every option whose role records it (`userturn.core.options`) and the sampler as sent; not
temperature and sample (a record's identity), nor concurrency, rate limits,
timeouts, retries or --limit. `fingerprint`: its sha256 as canonical JSON, carried by every record; the settings
are in the file's configuration line (`records.ConfigLine`). Resuming is refused where ok records of the same model,
dataset, mode and perturbation were made with other settings (`check_resume`), or carry no fingerprint (older files)
and have a key this run plans (`check_unfingerprinted`).
"""

from __future__ import annotations

import hashlib
import re
import socket
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from userturn.core.errors import UserError
from userturn.core.options import Options, roles
from userturn.core.records import RunInfo
from userturn.core.version import __version__

# The settings that name a result row: records differing here are different rows, not a conflict.
SCOPE: tuple[str, ...] = ("model", "dataset", "mode", "perturbation")
# The settings an assistant turn written by the model depends on (reusing one across runs needs them equal).
ASSISTANT_SETTINGS: tuple[str, ...] = (
    "model", "dataset", "assistant_source", "assistant_model",
    *(name for name, role in roles().items() if role.assistant), "seed", "extra_body", "engine",
    "server_sampler_defaults",
)
# What the engine does with the sampler and the seed: in a configuration only where the run names its engine.
ENGINE_SETTINGS: tuple[str, ...] = ("engine", "seed_honoured", "server_sampler_defaults", "batch_invariant")


class GenerationContext(BaseModel):
    """What a configuration holds besides the recorded options: what is probed, where the assistant turn comes from,
    and the identity of the prompt (template, its variables, stops, extra body fields)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    dataset: str
    mode: Literal["raw", "chat"]
    perturbation: str
    assistant_source: Literal["dataset", "model"]
    assistant_model: str | None = None
    template_engine: str | None = None
    template_sha256: str | None = None
    template_kwargs: dict[str, Any] | None = None
    chat_prompt_sha256: str | None = None
    stop: list[str] = Field(default_factory=list)
    stop_token_ids: list[int] = Field(default_factory=list)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    engine: str | None = Field(default=None, description="the serving engine (`EngineTraits.engine`; external: "
                               "a URL whose sampler defaults and seed handling cannot be known)")
    seed_honoured: bool | None = Field(default=None, description="whether the engine's sampler uses the request's "
                                       "seed; null: not known")
    server_sampler_defaults: dict[str, float | int] | None = Field(
        default=None, description="what the server applies to a sampling field a request leaves out; {}: all "
        "neutral; null: not known")
    batch_invariant: bool | None = Field(
        default=None, description="whether a request's output is independent of what else the server computes (false: "
        "llama-server with several slots or its prompt cache on, whose reruns differ); absent when not known")


def generation_config(context: GenerationContext, options: Options,
                      sampler: Mapping[str, float | int] | None = None) -> dict[str, Any]:
    """The configuration of a run's generations: `context` plus every option its role records
    (`userturn.core.options.Role`), as JSON values; `sampler` (the sampling fields sent, the engine's neutral values
    filled in) recorded as sent. The engine's fields (`ENGINE_SETTINGS`) are there only when `context.engine` is;
    `batch_invariant` only when known (so the configurations of engines that do not say keep their fingerprints)."""
    if context.engine is None:
        exclude = set(ENGINE_SETTINGS)
    else:
        exclude = {"batch_invariant"} if context.batch_invariant is None else set()
    return {**context.model_dump(mode="json", exclude=exclude),
            **options.recorded(assistant_by_model=context.assistant_source == "model"), **(sampler or {})}


def fingerprint(config: Mapping[str, Any]) -> str:
    """16 hex digits: sha256 of the configuration as canonical JSON (sorted keys)."""
    return hashlib.sha256(orjson.dumps(dict(config), option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def first_difference(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, Any, Any] | None:
    """(setting, old value, new value) of the first setting that differs, in `new`'s order; None if equal."""
    for key in [*new, *(k for k in old if k not in new)]:
        if old.get(key) != new.get(key):
            return key, old.get(key), new.get(key)
    return None


def _shown(key: str, value: Any) -> str:
    if isinstance(value, str):
        return value[:12] if key.endswith("sha256") else value
    return "null" if value is None else orjson.dumps(value).decode()


_URL_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")
# A flag whose name ends in key, token, secret or password (`--api-key`, `--hf-token`), not `--tokenizer` or
# `--api-key-env` (which names a variable).
_SECRET_FLAG = re.compile(r"^(--(?:[\w-]*-)?(?:key|token|secret|password))(=.*)?$", re.IGNORECASE)


def redacted_command(argv: Sequence[str], scrub: Callable[[str], str] = str) -> list[str]:
    """The command line with URL credentials (`user:pass@`) and the values of key, token, secret and password flags
    replaced by `[redacted]`; `scrub` removes what else is known to be secret (the probe passes
    `client.http.redact`)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        flag = None if hide_next else _SECRET_FLAG.match(arg)
        if hide_next:
            out.append("[redacted]")
        elif flag:
            out.append(f"{flag.group(1)}=[redacted]" if flag.group(2) else arg)
        else:
            out.append(scrub(_URL_CREDENTIALS.sub("[redacted]@", arg)))
        hide_next = flag is not None and not flag.group(2)
    return out


def is_secret_name(name: str) -> bool:
    """Whether an environment variable is named like a secret (`HF_TOKEN`, `OPENAI_API_KEY`, `DB_PASSWORD`)."""
    return _SECRET_FLAG.match(f"--{name.replace('_', '-')}") is not None


def redacted_environment(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the values of variables named like secrets (`is_secret_name`) as `[redacted]` and URL credentials
    removed from the others."""
    return {name: "[redacted]" if is_secret_name(name) else _URL_CREDENTIALS.sub("[redacted]@", value)
            for name, value in env.items()}


def run_info(argv: Sequence[str] | None = None, scrub: Callable[[str], str] = str) -> RunInfo:
    """This run: userturn version, start time (UTC), host and the redacted command line (`redacted_command`)."""
    return RunInfo(userturn_version=__version__, started=datetime.now(UTC).isoformat(timespec="seconds"),
                   host=socket.gethostname(), command=redacted_command(sys.argv if argv is None else argv, scrub))


class ConfigMismatch(UserError):
    """The results file holds records of the same condition made with other settings (exit 2)."""


def check_resume(existing: Mapping[str, Mapping[str, Any]], current: Mapping[str, Any], *, path: str,
                 hint: str = "use another --out") -> None:
    """Refuse to resume when `existing` ({fingerprint: config} of the records in `path`) holds a configuration of
    the same model, dataset, mode and perturbation as `current` that differs from it; the message names the first
    differing setting."""
    mine = fingerprint(current)
    for other_print, other in existing.items():
        if other_print == mine or any(other.get(k) != current.get(k) for k in SCOPE):
            continue
        difference = first_difference(other, current)
        if difference is None:
            continue
        key, old, new = difference
        raise ConfigMismatch(f"{path} holds records made with {key}={_shown(key, old)}, this run has "
                             f"{key}={_shown(key, new)}; {hint}")


def check_unfingerprinted(keys: Iterable[str], planned: Collection[str], *, path: str,
                          hint: str = "use another --out") -> None:
    """Refuse to resume when a record without a fingerprint (an older file) has a key this run plans."""
    for key in keys:
        if key in planned:
            raise ConfigMismatch(f"{path} holds records without a configuration fingerprint (written by an older "
                                 f"userturn), e.g. {key}, so their settings cannot be compared with this run's; "
                                 f"{hint}")


__all__ = ["ASSISTANT_SETTINGS", "ENGINE_SETTINGS", "SCOPE", "ConfigMismatch", "GenerationContext", "check_resume",
           "check_unfingerprinted", "fingerprint", "first_difference", "generation_config", "redacted_command",
           "redacted_environment", "run_info"]
