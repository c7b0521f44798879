"""What `userturn train` does (its flags are in `userturn.cli.train`): check, render and train, then write `DIR`:
the merged model, `training.json` (settings, data hash, base, losses, timings, versions) and `manifest.yaml` (the base
manifest serving `DIR` under a distinct name, with `probe.record_meta.trained`, which the probe copies into every
record's meta).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from userturn.client.train.data import DataFile, EvalSet
from userturn.client.train.trainer import BaseModelSource, TrainResult, TrainSettings
from userturn.core.errors import UserError
from userturn.serve.engines import ENGINES, engine_of
from userturn.serve.manifest import Manifest, load_manifest

TRAINING_FILE = "training.json"
MANIFEST_FILE = "manifest.yaml"


def base_source(manifest: Manifest) -> BaseModelSource:
    """The weights and serving tokenizer of a manifest's model, resolved as the CPU engine resolves them."""
    from userturn.core.packaged import is_gguf

    where = manifest.source or manifest.label
    if not engine_of(manifest).serves_checkpoint:
        trainable = " or ".join(k for k, e in ENGINES.items() if e.serves_checkpoint)
        raise UserError(f"{where}: engine {manifest.engine!r}: train needs a manifest whose engine serves a "
                        f"transformers checkpoint ({trainable})")
    model = manifest.resolve_path(manifest.model)
    if not model:
        raise UserError(f"{where}: no `model` to train")
    tokenizer = manifest.resolve_path(manifest.tokenizer)
    if is_gguf(model):
        from userturn.core.gguf_tokenizer import gguf_file, gguf_tokenizer_dir

        path = gguf_file(model)
        return BaseModelSource(model=str(path.parent), gguf_file=path.name,
                               tokenizer=tokenizer or str(gguf_tokenizer_dir(model)),
                               trust_remote_code=manifest.trust_remote_code)
    return BaseModelSource(model=model, tokenizer=tokenizer or model, revision=manifest.revision,
                           trust_remote_code=manifest.trust_remote_code)


def probe_renderer(manifest: Manifest) -> Any:
    """The renderer `userturn probe --manifest` uses for this manifest (same tokenizer, template and variables)."""
    from userturn.orchestrate.run_builder import ProbeTarget, TargetSource, load_renderer, manifest_layer, preview

    fields, options = preview(TargetSource(), [manifest_layer(manifest)])
    if not fields.get("tokenizer"):  # no probe tokenizer: the served model's own
        fields["tokenizer"] = manifest.resolve_path(manifest.tokenizer) or manifest.resolve_path(manifest.model)
    return load_renderer(ProbeTarget(base_urls=[], model=manifest.served_model_name or manifest.model or "", **fields),
                         options)


class TrainOutcome(BaseModel):
    out: Path
    model_name: str
    reused: bool
    result: TrainResult
    data: dict[str, Any]

    def summary(self) -> str:
        r = self.result
        verb = "already trained (same base, data and settings)" if self.reused else "trained"
        loss = f"loss {r.first_loss:.4f} -> {r.final_loss:.4f}" if r.first_loss is not None else "no loss logged"
        rate = f", {r.seconds_per_step:.2f} s/step" if r.seconds_per_step else ""
        return (f"userturn: {verb} {self.model_name}: {r.steps} steps ({loss}{rate}, {r.device}) on "
                f"{self.data['examples']} examples; model and manifest in {self.out} "
                f"(probe it: userturn probe --manifest {self.out / MANIFEST_FILE} ...)")


def train_tag(base: Manifest, data_sha256: str, settings: TrainSettings) -> str:
    """8 hex digits naming this training: base model, data and settings."""
    blob = json.dumps([base.model, base.request_model_name, data_sha256, settings.model_dump(mode="json")],
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("userturn", "trl", "peft", "transformers", "torch", "accelerate", "datasets"):
        with contextlib.suppress(PackageNotFoundError):
            out[name] = version(name)
    return out


def trained_manifest(base: Manifest, provenance: dict[str, Any], model_name: str, label: str) -> dict[str, Any]:
    """The base manifest serving `./` (the output directory) under `model_name`, with the provenance to record;
    paths relative to the base's folder made absolute."""
    data = base.model_dump(mode="json", exclude_unset=True)
    for key in ("revision", "tokenizer", "load_format"):
        data.pop(key, None)
    if data.get("chat_template"):
        data["chat_template"] = base.resolve_path(data["chat_template"])
    data.update(name=label, model="./", served_model_name=model_name)
    if not engine_of(base).uses_gpus:
        data["dtype"] = "float32"  # as saved: a CPU engine loads it as it is
    probe = dict(data.get("probe") or {})
    probe["tokenizer"] = "./"
    if probe.get("chat_template"):
        probe["chat_template"] = base.resolve_path(probe["chat_template"])
    probe["record_meta"] = {"trained": provenance}
    data["probe"] = probe
    return data


def existing_training(out: Path, tag: str) -> dict[str, Any] | None:
    """The training.json of `out` when it holds this very training (same tag), else None."""
    path = out / TRAINING_FILE
    if not path.is_file() or not (out / MANIFEST_FILE).is_file():
        return None
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return None
    return info if info.get("tag") == tag else None


def run_train(manifest_path: Path, data_path: Path, settings: TrainSettings, out: Path, *,
              eval_specs: list[str] | None = None, eval_sets: list[EvalSet] | None = None, progress: bool = True,
              reuse: bool = False) -> TrainOutcome:
    """Check, render, train, and write `out` (model, training.json, manifest.yaml). `reuse`: an `out` that already
    holds the same training is kept (posttrain resumes); otherwise `out` must not exist or be empty."""
    from userturn.client.data.loaders import load_items
    from userturn.client.train.data import dpo_examples, overlapping_row, read_rows, sft_examples
    from userturn.client.train.progress import RichProgress
    from userturn.client.train.trainer import encoder, load_tokenizer, require_train_extra, train

    require_train_extra()
    base = load_manifest(manifest_path)
    source = base_source(base)
    data: DataFile = read_rows(data_path, settings.method)
    sets = list(eval_sets or [])
    for spec in eval_specs or []:
        name, items, _ = load_items(spec, limit=None, shuffle_seed=None)
        sets.append(EvalSet.from_items(name if name == spec else f"{name} ({spec})", items))
    if (reason := overlapping_row(data, sets)) is not None:
        raise UserError(reason)
    tag = train_tag(base, data.sha256, settings)
    model_name = f"{base.request_model_name}-{settings.method}-{tag}"
    label = f"{base.label}-{settings.method}-{tag}"
    if reuse and (info := existing_training(out, tag)) is not None:
        return TrainOutcome(out=out, model_name=model_name, reused=True, result=TrainResult(**info["result"]),
                            data=info["data"])
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out}: already exists and is not empty; train into a new directory")
    renderer = probe_renderer(base)
    tokenizer = load_tokenizer(source)
    encode = encoder(tokenizer)
    build = sft_examples if settings.method == "sft" else dpo_examples
    examples, stats = build(data.rows, renderer, encode, settings.max_length)  # type: ignore[arg-type]
    if not examples:
        raise UserError(f"{data_path}: every row is longer than --max-length {settings.max_length} in its user "
                        "turn alone; nothing to train on")
    staging = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    started = datetime.now(UTC)
    callbacks = [RichProgress(f"train {settings.method} {label}", live=None if progress else False)]
    try:
        result = train(source, examples, settings, staging, tokenizer=tokenizer, callbacks=callbacks)
        data_info = {"path": str(data_path.resolve()), "sha256": data.sha256, **stats.as_dict()}
        provenance = {
            "tag": tag, "method": settings.method, "base_model": base.model,
            "base_served_model_name": base.request_model_name,
            "base_manifest": str(manifest_path.resolve()), "data_sha256": data.sha256, "data_rows": len(data.rows),
            "examples": stats.examples, "steps": result.steps,
            "settings": settings.model_dump(mode="json", exclude={"threads"}),
        }
        info = {
            "tag": tag, "model_name": model_name, "created": started.isoformat(timespec="seconds"),
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "base": {"manifest": str(manifest_path.resolve()), "name": base.label, "model": base.model,
                     "served_model_name": base.request_model_name, "source": source.model_dump()},
            "settings": settings.model_dump(mode="json"), "data": data_info,
            "eval_sets": [{"name": s.name, "items": len(s.ids)} for s in sets],
            "template_sha256": renderer.template_sha256, "result": result.model_dump(mode="json"),
            "versions": _versions(),
        }
        (staging / TRAINING_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        header = (f"# Written by `userturn train` ({started:%Y-%m-%d %H:%M} UTC): {base.label} + {settings.method} "
                  f"LoRA on {data_path.name} (sha256 {data.sha256[:12]}); see training.json.\n")
        manifest_text = header + yaml.safe_dump(trained_manifest(base, provenance, model_name, label),
                                                sort_keys=False, allow_unicode=True)
        (staging / MANIFEST_FILE).write_text(manifest_text, encoding="utf-8")
        load_manifest(staging / MANIFEST_FILE)  # what we wrote must load
        if out.exists():
            out.rmdir()  # empty (checked above)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return TrainOutcome(out=out, model_name=model_name, reused=False, result=result, data=data_info)
