"""A judged results file made by hand: two models x two datasets x two perturbations x two temperatures, several
items and samples, with configuration lines, superseded lines (a record re-judged and appended again), judge
failures, unjudged records and generation errors. For the readers that must count exactly what the report counts."""

from __future__ import annotations

import random
from pathlib import Path

from userturn.core.jsonl import JsonlWriter
from userturn.core.records import ConfigLine, JudgeVerdict, ProbeRecord, Usage, record_key
from userturn.core.taxonomy import LABELS

MODELS = ("model-a", "model-b")
DATASETS = ("gsm8k", "mt-bench")
PERTURBATIONS = ("none", "wrong_answer")
TEMPERATURES = (0.0, 1.0)


def fingerprint_of(model: str) -> str:
    return f"fp-{model}"


def grid_record(rng: random.Random, model: str, dataset: str, item: int, perturbation: str, temperature: float,
                sample: int) -> ProbeRecord:
    """One record: mostly labelled (genuine follow-ups more often for model-a on gsm8k), some errors."""
    roll = rng.random()
    key = record_key(model, dataset, f"q{item}", perturbation, temperature, sample)
    common = dict(key=key, model=model, dataset=dataset, item_id=f"q{item}", perturbation=perturbation,
                  temperature=temperature, sample=sample, seed=item * 100 + sample,
                  config_fingerprint=fingerprint_of(model),
                  messages=[{"role": "user", "content": f"Question {item} of {dataset}?"},
                            {"role": "assistant", "content": f"The answer is {item}. #### {item}"}],
                  reference_answer=str(item), correct=(item + sample) % 3 != 0,
                  usage=Usage(prompt_tokens=20 + item, completion_tokens=5 + sample, total_tokens=25 + item + sample))
    if roll < 0.06:
        return ProbeRecord(status="error", error="HTTP 500: boom", **common)
    turn = f"{model} asks about step {item}.{sample} at T={temperature}"
    if roll < 0.12:
        return ProbeRecord(status="ok", user_turn=turn, finish_reason="stop", **common)  # unjudged
    if roll < 0.18:
        return ProbeRecord(status="ok", user_turn=turn, finish_reason="stop", judge_status="error",
                           judges=[JudgeVerdict(judge="judge-a", status="error", error="timed out")], **common)
    bias = 0.6 if (model, dataset) == ("model-a", "gsm8k") else 0.35
    label = "genuine_followup" if rng.random() < bias else rng.choice(LABELS[1:])
    return ProbeRecord(status="ok", user_turn=turn, finish_reason="stop", judge_status="ok", label=label,
                       label_source="judge", judge_panel="panel-1",
                       judges=[JudgeVerdict(judge="judge-a", status="ok", label=label, rationale=f"judge-a: {label}")],
                       **common)


def write_grid(path: Path, *, items: int = 6, samples: int = 2, seed: int = 7) -> Path:
    """The judged file; every sixth ok record's line is superseded by a later line of the same key (its label
    changed to `generic`), as a re-judge appends it."""
    rng = random.Random(seed)
    later: list[ProbeRecord] = []
    written = 0
    with JsonlWriter(path) as writer:
        for model in MODELS:
            writer.write_config(ConfigLine(fingerprint=fingerprint_of(model),
                                           config={"model": model, "max_tokens": 64, "top_p": 1.0}))
            for dataset in DATASETS:
                for perturbation in PERTURBATIONS:
                    for temperature in TEMPERATURES:
                        for item in range(items):
                            for sample in range(samples):
                                record = grid_record(rng, model, dataset, item, perturbation, temperature, sample)
                                writer.write(record)
                                written += 1
                                if record.label is not None and written % 6 == 0:
                                    later.append(record.model_copy(update={
                                        "label": "generic",
                                        "judges": [JudgeVerdict(judge="judge-a", status="ok", label="generic",
                                                                rationale="judge-a: generic, on a second look")]}))
        for record in later:
            writer.write(record)
    return path
