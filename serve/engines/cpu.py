"""The embedded CPU engine (`python -m userturn.serve.cpu_engine`, transformers + torch): manifest `engine:
transformers`. Its sampler has no hidden defaults (top-p 1, no top-k) and it honours seeds and stop_token_ids."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from userturn.core.engine_traits import EngineTraits
from userturn.core.errors import UserError
from userturn.core.packaged import is_gguf
from userturn.serve.engines.base import EngineDefinition, LaunchArgs, flag_args

if TYPE_CHECKING:
    from userturn.serve.manifest import Manifest

MODULE = "userturn.serve.cpu_engine"
HUB_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken"]

TRAITS = EngineTraits(
    engine="transformers", seed_honoured=True, server_sampler_defaults={}, neutral_sampler={"top_p": 1.0, "top_k": -1},
    max_stop_strings=None, honours_stop_token_ids=True, stop_reason_field="matched_stop", reasoning_field=None,
)


class CpuEngine(EngineDefinition):
    kind = "transformers"
    summary = "the embedded CPU engine (transformers; GGUF files dequantised)"
    takes_api_key = False
    serves_checkpoint = True
    cpu_only_cpus, cpu_only_mem = 2, "8G"
    traits = TRAITS

    def argv(self, m: Manifest, a: LaunchArgs) -> list[str]:
        return [a.python, "-m", MODULE, *flag_args(
            ("--model", a.model or m.resolve_path(m.model) or ""), ("--tokenizer", m.resolve_path(m.tokenizer)),
            ("--revision", m.revision), ("--host", a.host or m.host), ("--port", a.port),
            ("--served-model-name", m.request_model_name), ("--dtype", m.dtype), ("--seed", m.seed),
            ("--context-length", m.context_length), ("--chat-template", m.resolve_path(m.chat_template)),
            ("--trust-remote-code", m.trust_remote_code), ("--threads", a.threads)), *m.extra_args]

    def installed(self, m: Manifest) -> None:
        import importlib.util

        needed = ("torch", "transformers", *(("gguf", "accelerate") if is_gguf(m.model) else ()))
        for mod in needed:
            if importlib.util.find_spec(mod) is None:
                what = f"engine '{self.kind}'" if mod in ("torch", "transformers") else "a GGUF model"
                raise UserError(f"{what} needs {mod}: pip install 'userturn[cpu]'")

    def resolve_model(self, m: Manifest) -> str | None:
        """A local dir or GGUF file as is, a `pkg:` GGUF file inside its installed package, a hub id downloaded (or
        taken from the cache)."""
        packaged = self.resolve_packaged(m)
        if packaged is not None:
            return packaged
        model = m.resolve_path(m.model) or ""
        where = f"{m.source}: model" if m.source else "model"
        if is_gguf(model):
            if not Path(model).expanduser().is_file():
                raise UserError(f"{where}: GGUF file not found: {model}")
            return str(Path(model).expanduser())
        if Path(model).expanduser().exists():
            return model
        try:
            from huggingface_hub import snapshot_download

            return snapshot_download(model, revision=m.revision, allow_patterns=HUB_PATTERNS, etag_timeout=10)
        except Exception as exc:
            reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise UserError(f"{where}: cannot get {model!r} from the Hugging Face hub ({type(exc).__name__}: "
                            f"{reason[:160]}); use a local path, or manifests/quickstart-cpu.yaml (SmolLM2 from an "
                            "installed package, no hub needed)") from None

    def resolves_model_in_job(self, m: Manifest) -> bool:
        return not m.command


ENGINE = CpuEngine()
