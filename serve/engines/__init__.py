"""The engine registry: one definition per `engine:` kind, each in its own module (`base.EngineDefinition`).

Adding an engine: a module here with an `EngineDefinition` subclass and `ENGINE = ...`, and one line below."""

from __future__ import annotations

from typing import TYPE_CHECKING

from userturn.serve.engines import cpu, external, llamacpp, sglang, vllm
from userturn.serve.engines.base import EngineDefinition, LaunchArgs, Target, flag_args

if TYPE_CHECKING:
    from userturn.serve.manifest import Manifest

ENGINES: dict[str, EngineDefinition] = {e.kind: e for e in (
    sglang.ENGINE,
    vllm.ENGINE,
    cpu.ENGINE,
    llamacpp.ENGINE,
    external.ENGINE,
)}


def definition(kind: str) -> EngineDefinition:
    """The definition of `kind` (a manifest's `engine:`); KeyError for an unknown kind."""
    return ENGINES[kind]


def engine_of(m: Manifest) -> EngineDefinition:
    """The definition of the engine that serves `m`."""
    return ENGINES[m.engine]


__all__ = ["ENGINES", "EngineDefinition", "LaunchArgs", "Target", "definition", "engine_of", "flag_args"]
