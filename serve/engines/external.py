"""An endpoint given by URL (`engine: external`, `base_url:`): nothing is launched and nothing about its server is
known beyond what it answers (`EXTERNAL` traits)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from userturn.core.engine_traits import EXTERNAL
from userturn.serve.engines.base import EngineDefinition

if TYPE_CHECKING:
    from userturn.serve.manifest import Manifest


class External(EngineDefinition):
    kind = EXTERNAL.engine
    summary = "an OpenAI-compatible endpoint at base_url (nothing launched)"
    launches = False
    traits = EXTERNAL

    def check(self, m: Manifest) -> None:
        if m.command or m.replicas > 1:
            raise ValueError(f"engine '{self.kind}' launches nothing: drop command/replicas")
        if m.api_key is not None:
            raise ValueError("api_key is for launched servers: an external endpoint's key goes in api_key_env")
        super().check(m)

    def resolve_model(self, m: Manifest) -> str | None:
        return None

    def resolves_model_in_job(self, m: Manifest) -> bool:
        return False


ENGINE = External()
