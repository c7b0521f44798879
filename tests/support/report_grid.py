"""A synthetic judged results grid for the report's layout and figure checks (no network, no model): `grid_records`
builds records with labels from a judge, task correctness and every perturbation paired with `none`;
`write_grid` writes them as a results file."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from userturn.core.jsonl import JsonlWriter
from userturn.core.records import JudgeVerdict, ProbeRecord, record_key

PAPER_MODELS = (*(f"Qwen/Qwen3.5-{s}" for s in ("0.8B", "2B", "4B", "9B", "27B", "35B-A3B", "122B-A10B",
                                                "397B-A17B")),
                "openai/gpt-oss-20b", "openai/gpt-oss-120b", "glm-4.5-air", "meta-llama/Llama-3.3-70B-Instruct")
TEMPERATURES = (0.0, 0.6, 1.0, 1.2)
PERTURBATIONS = ("none", "wrong_answer", "truncated")
OTHER_LABELS = ("restates_query", "generic", "assistant_continuation", "unrelated_query")


def grid_records(models: Sequence[str] = PAPER_MODELS, datasets: Sequence[str] = ("gsm8k",),
                 temperatures: Sequence[float] = TEMPERATURES, perturbations: Sequence[str] = PERTURBATIONS,
                 items: int = 10, samples: int = 2, seed: int = 7) -> list[ProbeRecord]:
    """len(models) x len(datasets) x len(temperatures) x len(perturbations) report rows (12 x 1 x 4 x 3 = 144 by
    default). Follow-up rates grow with temperature and model rank (0-30%), a perturbation lowers them."""
    rng = random.Random(seed)
    out = []
    for m, model in enumerate(models):
        for dataset in datasets:
            for perturbation in perturbations:
                for t in temperatures:
                    for i in range(items):
                        for k in range(samples):
                            rate = 0.02 + 0.012 * m + 0.12 * t - (0.05 if perturbation != "none" else 0.0)
                            label = ("genuine_followup" if rng.random() < rate else rng.choice(OTHER_LABELS))
                            verdict = JudgeVerdict(judge="judge-a", status="ok", label=label, rationale="why")
                            out.append(ProbeRecord(
                                key=record_key(model, dataset, f"q{i}", perturbation, t, k), model=model,
                                dataset=dataset, item_id=f"q{i}", perturbation=perturbation, temperature=t,
                                sample=k, seed=k, status="ok", user_turn=f"follow-up {i}/{k}",
                                messages=[{"role": "user", "content": f"question {i}"},
                                          {"role": "assistant", "content": f"answer {i}"}],
                                label=label, label_source="judge", judge_status="ok", judges=[verdict],
                                correct=(i + m) % 4 != 0 if perturbation == "none" else (i % 3 == 0)))
    return out


def write_grid(path: Path, records: Sequence[ProbeRecord]) -> Path:
    with JsonlWriter(path) as writer:
        for r in records:
            writer.write(r)
    return path
