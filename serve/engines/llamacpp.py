"""llama.cpp's `llama-server`, flags as in llama.cpp's common/arg.cpp (the sources vendored in llama-cpp-python
0.3.36). A CPU alternative to the embedded engine for users who already have `llama-server`; on GPUs with `gpus:`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from userturn.core import defaults
from userturn.core.engine_traits import EngineTraits
from userturn.core.errors import UserError
from userturn.core.packaged import PKG_PREFIX
from userturn.serve.cpu_threads import default_threads
from userturn.serve.engines.base import EngineDefinition, LaunchArgs, flag_args

if TYPE_CHECKING:
    from userturn.serve.manifest import Manifest

BINARY = "llama-server"
IMAGE_REPOSITORY = "ghcr.io/ggml-org/llama.cpp"  # its server images keep the binary at /app/llama-server
IMAGE_BINARY = "/app/llama-server"
# Every sampler llama-server applies by default (common/common.h: top-k 40, top-p 0.95, min-p 0.05) or takes from
# the GGUF's general.sampling.* keys (top_k, top_p, min_p, xtc, penalties, mirostat), set to "off" at launch; a
# request still sets its own.
NEUTRAL_FLAGS = ["--top-k", "0", "--top-p", "1.0", "--min-p", "0.0", "--xtc-probability", "0.0",
                 "--repeat-penalty", "1.0", "--mirostat", "0"]
# The request field of every sampler llama-server reports in /props (tools/server: params_from_json_cmpl), at the
# value that turns it off: sent in every request, so T=1 is plain temperature sampling on a running llama-server
# whatever it was started with, as on one launched here.
NEUTRAL_REQUEST: dict[str, float | int] = {
    "top_p": 1.0, "top_k": 0, "min_p": 0.0, "typical_p": 1.0, "top_n_sigma": -1.0, "xtc_probability": 0.0,
    "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0, "mirostat": 0}
NO_PROMPT_CACHE = "--no-cache-prompt"

TRAITS = EngineTraits(
    engine="llamacpp", seed_honoured=True, server_sampler_defaults={},
    # several slots share each decode step's batch, and a cached prompt prefix is not recomputed: either changes
    # the numbers a request's tokens are sampled from (reruns differed on 30 of 30 records at 8 slots)
    batch_invariant=False,
    neutral_sampler=NEUTRAL_REQUEST,
    max_stop_strings=None,
    honours_stop_token_ids=False,  # llama-server ignores `stop_token_ids`: stops must be strings
    stop_reason_field=None, reasoning_field="reasoning_content",
    weights_route="/props",  # {"model_path": ..., "default_generation_settings": {...}, "total_slots": ...}
    sampler_route="/props", identity_route="/props",
    special_tokens_hint="restart it with -sp",  # a launched llama-server gets -sp (`argv`)
)


def slots(m: Manifest) -> int:
    """llama-server's `--parallel`: one slot per request the run keeps in flight (`probe.concurrency`, which the
    run sets to its resolved concurrency before launching)."""
    return m.probe.concurrency or defaults.CONCURRENCY


def is_file_model(model: str) -> bool:
    """A GGUF file (a path or a `pkg:` name) is `-m`; anything else a hub repo for `-hf` (repo[:quant])."""
    return model.startswith(PKG_PREFIX) or model.lower().endswith(".gguf") or Path(model).is_file()


class LlamaCpp(EngineDefinition):
    kind = "llamacpp"
    summary = "llama.cpp's llama-server (CPU, or GPUs with gpus:)"
    startup_timeout_s = 900.0
    sampler_flags = ("--top-k", "--top-p", "--min-p", "--xtc-probability", "--repeat-penalty", "--mirostat",
                     "--samplers", "--temp", "--typical", "--dry-multiplier", "--presence-penalty",
                     "--frequency-penalty", "--top-nsigma")
    traits = TRAITS

    def check(self, m: Manifest) -> None:
        super().check(m)
        if m.probe.send_stop_token_ids:
            raise ValueError("probe.send_stop_token_ids: llama-server ignores stop_token_ids; stop with "
                             "probe.stop strings")

    def binary(self, m: Manifest, a: LaunchArgs) -> str:
        """The manifest's `binary`, else the official image's /app/llama-server in a pod, else llama-server on
        PATH (this machine or the SLURM job's)."""
        if m.binary:
            return m.binary
        if a.target == "k8s" and (a.image or "").startswith(IMAGE_REPOSITORY):
            return IMAGE_BINARY
        return BINARY

    def engine_traits(self, m: Manifest) -> EngineTraits:
        """A launch with one slot and `--no-cache-prompt` computes each request alone: batch invariant."""
        traits = super().engine_traits(m)
        alone = slots(m) == 1 and NO_PROMPT_CACHE in m.extra_args and not m.command
        return traits.model_copy(update={"batch_invariant": True}) if alone else traits

    def argv(self, m: Manifest, a: LaunchArgs) -> list[str]:
        """`-sp`: special tokens come back as text, so a generated `<|im_start|>` is seen (and judged); on CPU
        (gpus 0) no GPU layers and, launched here, half the usable CPUs' threads (`cpu_threads.default_threads`:
        llama.cpp's own default, every core, collapses on a busy machine) unless the launch or extra_args say."""
        spec = m.resolve_path(m.model) or ""
        target = a.model or spec
        gpus = m.gpus_per_replica > 0
        n = slots(m)
        threads = a.threads
        if threads is None and not gpus and a.target == "local" and not _sets_threads(m.extra_args):
            threads = default_threads()
        return [self.binary(m, a), "-m" if is_file_model(spec) else "-hf", target, *flag_args(
            ("--host", a.host or m.host), ("--port", a.port), ("--alias", m.request_model_name), ("--jinja", True),
            ("-sp", True), ("--ctx-size", m.context_length), ("--seed", m.seed),
            ("--chat-template-file", m.resolve_path(m.chat_template)),
            # a slot per request the probe keeps in flight, sharing one KV buffer (else -c is split over the slots)
            ("--parallel", n), ("--kv-unified", n > 1),
            ("--threads", None if gpus else threads), ("--n-gpu-layers", 999 if gpus else None),
            # llama.cpp's parser takes the next word as the value (never as a flag), and has no --flag=value form
            ("--api-key", a.api_key)), *NEUTRAL_FLAGS, *m.extra_args]

    def installed(self, m: Manifest) -> None:
        exe = m.binary or BINARY
        if shutil.which(exe) is None and not os.path.isfile(exe):
            raise UserError(f"engine 'llamacpp' needs {exe} on PATH: install llama.cpp "
                            "(https://github.com/ggml-org/llama.cpp), or set binary: /path/to/llama-server")


def _sets_threads(extra_args: list[str]) -> bool:
    return any(w.split("=", 1)[0] in ("-t", "--threads") for w in extra_args)


ENGINE = LlamaCpp()
