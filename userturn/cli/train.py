"""`userturn train`: LoRA-fine-tune a manifest's model on exported user turns; the work
(`userturn.orchestrate.training_run`) is imported only when the command runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from userturn.cli.paths import Paths

NAME = "train"
EXAMPLES = """\
  # on MT-Bench's human second turns (userturn export ... --format sft-human), never on held-out items
  userturn train --manifest quickstart-cpu --data human.jsonl --method sft --out models/smol-sft \\
      --max-steps 40 --eval-set held-out.jsonl
  userturn train --manifest qwen3.5-2b --data pairs.jsonl --method dpo --out models/q2b-dpo --lora-r 16 --epochs 1
Then probe the trained model: userturn probe --manifest models/smol-sft/manifest.yaml ..."""
PATHS = Paths()


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
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
    return p



def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from userturn.client.train.trainer import TrainSettings
    from userturn.core.errors import UserError, first_error
    from userturn.orchestrate.training_run import run_train

    try:
        settings = TrainSettings(**{name: getattr(args, name) for name in TrainSettings.model_fields if name in args})
    except ValidationError as exc:
        raise UserError(f"train: --{first_error(exc).replace('_', '-')}") from None
    outcome = run_train(Path(args.manifest), Path(args.data), settings, Path(args.out), eval_specs=args.eval_set,
                        progress=not args.no_progress)
    print(outcome.summary(), file=sys.stderr)
    return 0
