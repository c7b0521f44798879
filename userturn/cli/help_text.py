"""Examples printed under each command's `--help` (every line that starts with `userturn` is a complete command
line: tests/test_cli_help.py parses each of them with the real parser)."""

from __future__ import annotations

TOP = """\
  userturn run smoke                       # the offline quick start: serve, probe, label, report
  userturn list                            # shipped manifests and experiments, datasets, perturbations
  userturn probe --manifest qwen3.5-9b --dataset gsm8k --limit 100 --out runs/q9b.jsonl
  userturn report runs/q9b.jsonl
Each command's --help ends with its own examples."""

EXAMPLES: dict[str, str] = {
    "probe": """\
  # a server you run yourself (raw completions, the model's own chat template)
  userturn probe --base-url http://127.0.0.1:30000/v1 --model Qwen/Qwen3.5-9B --tokenizer Qwen/Qwen3.5-9B \\
      --dataset gsm8k:test --limit 100 --temperature 0 --temperature 1 --out runs/q9b.jsonl
  # a shipped manifest: launches the server, probes, shuts it down (`userturn list manifests`)
  userturn probe --manifest quickstart-cpu --dataset mt-bench:reference --perturb none --perturb wrong_answer \\
      --out runs/smol.jsonl
  # judge inline while probing
  userturn probe --manifest qwen3.5-9b --dataset gsm8k --limit 50 --out runs/q9b.jsonl \\
      --judge-base-url http://127.0.0.1:30001/v1 --judge-model Qwen/Qwen3.5-27B
Rerun the same command to resume: records already ok in --out are skipped.""",
    "judge": """\
  userturn judge runs/q9b.jsonl --judge-base-url http://127.0.0.1:30001/v1 --judge-model Qwen/Qwen3.5-27B
  # a panel of two judges (majority label, agreement in the report), own output file
  userturn judge runs/q9b.jsonl --out runs/q9b.panel.jsonl --judge-base-url http://127.0.0.1:30001/v1 \\
      --judge-model Qwen/Qwen3.5-27B --judge-base-url http://127.0.0.1:30002/v1 --judge-model openai/gpt-oss-120b""",
    "report": """\
  userturn report runs/q9b.judged.jsonl
  userturn report runs/q9b.judged.jsonl --wide
  userturn report runs/q9b.judged.jsonl --html report.html --plots figures/
  userturn report runs/q9b.judged.jsonl --json
  # a paper's table: unperturbed rows at T=0, models by size (or --model-order A,B)
  userturn report runs/q9b.judged.jsonl --format latex --perturb none --temperature 0
  userturn report runs/q9b.judged.jsonl --format csv --model 'Qwen/*'
The default table fits 100 columns (long names wrap); --wide adds items, label mix, judges and tokens per row.""",
    "judge-eval": """\
  userturn judge-eval gold.jsonl --judge-base-url http://127.0.0.1:30001/v1 --judge-model Qwen/Qwen3.5-27B
  userturn judge-eval gold.jsonl --with-rules --json --out pred.jsonl \\
      --judge-base-url http://127.0.0.1:30001/v1 --judge-model Qwen/Qwen3.5-27B""",
    "label": """\
  userturn label runs/q9b.judged.jsonl --out gold.jsonl --labeller ann
  # a second labeller: the same 200 records (same --seed), in another order
  userturn label runs/q9b.judged.jsonl --out gold.jsonl --labeller bob --n 200 --seed 0 --port 8765 --no-browser
Rerun the same command to resume: every answer is on disk as soon as it is given.""",
    "serve": """\
  userturn serve quickstart-cpu
  userturn serve qwen3.5-9b --dry-run
  userturn serve manifests/qwen3.5-397b-a17b.yaml --emit slurm --out job.sbatch
  userturn serve qwen3.5-9b --launcher slurm""",
    "run": """\
  userturn run smoke
  userturn run experiments/paper.yaml --dry-run
  userturn run experiments/paper.yaml --out-dir /scratch/runs --launcher slurm
  # split the items over 4 processes (results.shard-I-of-4.jsonl each); --launcher slurm: a 4-task job array
  userturn run experiments/paper.yaml --workers 4
Rerun the same command to resume; --dry-run checks every model's template with one rendered prompt.""",
    "export": """\
  userturn export runs/q9b.judged.jsonl --format sft --out sft.jsonl
  userturn export runs/q9b.judged.jsonl --format preference --out pairs.jsonl
  userturn export runs/smoke/results.jsonl --format sft-human --out human.jsonl
  # Inspect eval logs, one per model x dataset x configuration; read them with: inspect view --log-dir logs/
  userturn export runs/grid/ --format inspect --out logs/""",
    "show": """\
  userturn show runs/smoke/results.jsonl
  userturn show runs/smoke/results.jsonl \\
      'smollm2-135m-instruct|mt-bench:reference|107|raw|none|t=0.0|s=0' --manifest quickstart-cpu
  userturn show runs/q9b.jsonl 'qwen3.5-9b|gsm8k|12|raw|none|t=0.0|s=0' --tokenizer Qwen/Qwen3.5-9B --prompt-only""",
    "compact": """\
  userturn compact runs/q9b.judged.jsonl""",
    "rerank": """\
  userturn rerank runs/q9b.judged.jsonl
  userturn rerank runs/q9b.judged.jsonl --json""",
    "list": """\
  userturn list
  userturn list manifests""",
    "train": """\
  # on MT-Bench's human second turns (userturn export ... --format sft-human), never on held-out items
  userturn train --manifest quickstart-cpu --data human.jsonl --method sft --out models/smol-sft \\
      --max-steps 40 --eval-set held-out.jsonl
  userturn train --manifest qwen3.5-2b --data pairs.jsonl --method dpo --out models/q2b-dpo --lora-r 16 --epochs 1
Then probe the trained model: userturn probe --manifest models/smol-sft/manifest.yaml ...""",
    "posttrain": """\
  userturn posttrain experiments/posttrain.yaml
  userturn posttrain experiments/posttrain.yaml --out-dir /scratch/runs --no-progress
Rerun the same command to resume: finished stages are reused.""",
}


def epilog(command: str | None) -> str | None:
    """The `examples:` block of a command's help (None: of `userturn` itself); None for a command without any."""
    text = TOP if command is None else EXAMPLES.get(command)
    return None if text is None else "examples:\n" + text
