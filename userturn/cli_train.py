"""`userturn train`: LoRA-fine-tune a manifest's base model on exported user turns; write a servable model + manifest.

`DIR` gets the merged model (transformers checkpoint + tokenizer), `training.json` (settings, data hash, base model,
losses, timings, library versions) and `manifest.yaml`: the base manifest with the model swapped for `DIR`, a
distinct served model name, and `probe.record_meta.trained` (the provenance), which the probe copies into the meta
of every record it writes for this model. `userturn probe --manifest DIR/manifest.yaml` and experiment files use it
as they use any manifest.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from userturn.client.train import BaseModelSource, TrainResult, TrainSettings
from userturn.client.train_data import DataFile, EvalSet, RenderStats
from userturn.errors import UserError
from userturn.serve.manifest import Manifest, load_manifest

TRAINABLE_ENGINES = ("transformers", "sglang")  # engines that serve a transformers checkpoint directory
TRAINING_FILE = "training.json"
MANIFEST_FILE = "manifest.yaml"


def register(sub: argparse._SubParsersAction) -> None:
    """Add `train` and `posttrain` to the `userturn` parser."""
    p = sub.add_parser("train", help="LoRA-fine-tune a manifest's model on exported user turns (TRL)",
                       description="Fine-tune the base model of a serving manifest with LoRA (TRL SFTTrainer or "
                                   "DPOTrainer) on `userturn export` rows, every example rendered with the model's "
                                   "own chat template and the loss on the final user turn only (SFT) or on the "
                                   "chosen/rejected user turns (DPO). Writes the merged model, training.json and a "
                                   "manifest.yaml that serves it under a distinct name into --out.")
    p.add_argument("--manifest", required=True, metavar="M", help="serving manifest of the base model")
    p.add_argument("--data", required=True, metavar="FILE.jsonl",
                   help="`userturn export` output: sft / sft-human rows (--method sft), preference rows (dpo)")
    p.add_argument("--method", choices=["sft", "dpo"], required=True)
    p.add_argument("--out", required=True, metavar="DIR", help="new directory for the model and its manifest")
    p.add_argument("--max-steps", type=int, default=None, metavar="N", help="optimizer steps (wins over --epochs)")
    p.add_argument("--epochs", type=float, default=1.0, metavar="E")
    p.add_argument("--lora-r", type=int, default=16, metavar="R", help="LoRA rank (alpha = 2R)")
    p.add_argument("--learning-rate", type=float, default=None, metavar="LR", help="default 2e-4 (sft), 5e-5 (dpo)")
    p.add_argument("--seed", type=int, default=0, metavar="S")
    p.add_argument("--batch-size", type=int, default=1, metavar="B",
                   help="examples per step (1: no padding, the fastest per example on a CPU)")
    p.add_argument("--grad-accum", type=int, default=1, metavar="K", help="steps accumulated per optimizer step")
    p.add_argument("--max-length", type=int, default=384, metavar="T",
                   help="tokens per example; a longer prompt is cut on the left (counted in training.json)")
    p.add_argument("--beta", type=float, default=0.1, help="DPO beta")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--eval-set", action="append", default=[], metavar="FILE|NAME",
                   help="evaluation dataset (JSONL or built-in NAME[:split]) whose items must not be in the data; "
                        "repeatable")
    p.add_argument("--no-progress", action="store_true", help="plain progress lines instead of the live bar")
    p.set_defaults(func=train_command)

    pt = sub.add_parser("posttrain", help="probe base -> judge -> export -> train -> probe held-out -> compare",
                        description="Run a post-training experiment file (see experiments/posttrain.yaml): probe the "
                                    "base model, judge, export training rows from items outside the held-out set, "
                                    "train, probe the trained model on the held-out items, and report base vs "
                                    "trained with the paired difference and its interval. Rerun to resume.")
    pt.add_argument("experiment", metavar="POSTTRAIN.yaml")
    pt.add_argument("--out-dir", default=None, help="parent of the run directory (default: the file's out_dir)")
    pt.add_argument("--no-progress", action="store_true", help="plain progress lines instead of live views")
    pt.set_defaults(func=posttrain_command)


def train_command(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    outcome = run_train(Path(args.manifest), Path(args.data), settings, Path(args.out), eval_specs=args.eval_set,
                        progress=not args.no_progress)
    print(outcome.summary(), file=sys.stderr)
    return 0


def posttrain_command(args: argparse.Namespace) -> int:
    from userturn.posttrain import posttrain_main

    return posttrain_main(Path(args.experiment), out_dir=args.out_dir, progress=not args.no_progress)


def settings_from(args: argparse.Namespace) -> TrainSettings:
    from pydantic import ValidationError

    from userturn.errors import first_error

    try:
        return TrainSettings(method=args.method, max_steps=args.max_steps, epochs=args.epochs, lora_r=args.lora_r,
                             learning_rate=args.learning_rate, seed=args.seed, batch_size=args.batch_size,
                             grad_accum=args.grad_accum,
                             max_length=args.max_length, beta=args.beta, threads=args.threads)
    except ValidationError as exc:
        raise UserError(f"train: --{first_error(exc).replace('_', '-')}") from None


# ----- the base model ------------------------------------------------------------------------------------------


def base_source(manifest: Manifest) -> BaseModelSource:
    """The weights and serving tokenizer of a manifest's model, resolved as the CPU engine resolves them."""
    from userturn.packaged import is_gguf

    where = manifest.source or manifest.label
    if manifest.engine not in TRAINABLE_ENGINES:
        raise UserError(f"{where}: engine {manifest.engine!r}: train needs a manifest whose engine serves a "
                        f"transformers checkpoint ({' or '.join(TRAINABLE_ENGINES)})")
    model = manifest.resolve_path(manifest.model)
    if not model:
        raise UserError(f"{where}: no `model` to train")
    tokenizer = manifest.resolve_path(manifest.tokenizer)
    if is_gguf(model):
        from userturn.gguf_tokenizer import gguf_file, gguf_tokenizer_dir

        path = gguf_file(model)
        return BaseModelSource(model=str(path.parent), gguf_file=path.name,
                               tokenizer=tokenizer or str(gguf_tokenizer_dir(model)),
                               trust_remote_code=manifest.trust_remote_code)
    return BaseModelSource(model=model, tokenizer=tokenizer or model, revision=manifest.revision,
                           trust_remote_code=manifest.trust_remote_code)


def probe_renderer(manifest: Manifest) -> Any:
    """The renderer `userturn probe --manifest` uses for this manifest (same tokenizer, template and variables)."""
    from userturn.run_builder import ProbeTarget, load_renderer, manifest_layer, resolve

    fields, options = resolve([manifest_layer(manifest)])
    if not fields.get("tokenizer"):  # no probe tokenizer: the served model's own
        fields["tokenizer"] = manifest.resolve_path(manifest.tokenizer) or manifest.resolve_path(manifest.model)
    return load_renderer(ProbeTarget(base_urls=[], model=manifest.served_model_name or manifest.model or "", **fields),
                         options)


# ----- the run ---------------------------------------------------------------------------------------------------


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


def load_eval_sets(specs: list[str]) -> list[EvalSet]:
    from userturn.cli_probe import load_items

    sets = []
    for spec in specs:
        name, items, _ = load_items(spec, limit=None, shuffle_seed=None)
        sets.append(EvalSet.from_items(name if name == spec else f"{name} ({spec})", items))
    return sets


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
    """The base manifest serving `./` (the output directory) under `model_name`, with the provenance to record.

    Paths the base wrote relative to its own folder are made absolute (the new file lives elsewhere).
    """
    data = base.model_dump(mode="json", exclude_unset=True)
    for key in ("revision", "tokenizer", "load_format"):
        data.pop(key, None)
    if data.get("chat_template"):
        data["chat_template"] = base.resolve_path(data["chat_template"])
    data.update(name=label, model="./", served_model_name=model_name)
    if base.engine == "transformers":
        data["dtype"] = "float32"  # as saved
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
    from userturn.client.train import encoder, load_tokenizer, require_train_extra, train
    from userturn.client.train_data import dpo_examples, overlapping_row, read_rows, sft_examples
    from userturn.client.train_progress import RichProgress

    require_train_extra()
    base = load_manifest(manifest_path)
    source = base_source(base)
    data: DataFile = read_rows(data_path, settings.method)
    sets = list(eval_sets or []) + load_eval_sets(list(eval_specs or []))
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
    stats: RenderStats
    examples: list[Any]
    if settings.method == "sft":
        examples, stats = sft_examples(data.rows, renderer, encode, settings.max_length)  # type: ignore[arg-type]
    else:
        examples, stats = dpo_examples(data.rows, renderer, encode, settings.max_length)  # type: ignore[arg-type]
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
