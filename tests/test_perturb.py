"""Perturbations of the assistant turn: exact transforms, determinism, errors."""

from __future__ import annotations

import hashlib

import pytest
from userturn.client.perturb import (
    GENERIC_RESPONSE,
    PERTURBATIONS,
    PerturbationNotApplicable,
    SwapRing,
    perturb,
    validate,
)
from userturn.client.scoring import find_final_number

from userturn.errors import UserError
from userturn.records import Message


def convo(answer: str, query: str = "How many?") -> list[Message]:
    return [Message(role="system", content="be brief"), Message(role="user", content=query),
            Message(role="assistant", content=answer)]


MATH = convo("She has 3 + 4 = 7 apples.\nThe answer is 1,234.")


def test_names():
    assert PERTURBATIONS == ("none", "wrong_answer", "truncate", "swap", "remove", "generic")
    with pytest.raises(UserError, match=r"unknown perturbation 'shuffle' \(choose from none, wrong_answer"):
        perturb("shuffle", MATH, seed=0, pool=[])
    with pytest.raises(UserError):
        validate(["none", "typo"])


def test_none_is_an_equal_copy():
    out = perturb("none", MATH, seed=0, pool=[])
    assert out == MATH and out is not MATH


def test_remove_drops_the_assistant_turn():
    assert perturb("remove", MATH, seed=0, pool=[]) == MATH[:2]


def test_generic_fixed_non_answer():
    out = perturb("generic", MATH, seed=0, pool=[])
    assert out[:2] == MATH[:2]
    assert out[-1] == Message(role="assistant", content=GENERIC_RESPONSE)


def test_truncate_cuts_at_the_word_boundary_before_the_middle():
    text = "one two three four five six seven eight"
    out = perturb("truncate", convo(text), seed=0, pool=[])[-1].content
    assert out == "one two three four"
    assert text.startswith(out) and len(out) <= len(text) // 2
    assert perturb("truncate", convo("abcdefgh"), seed=0, pool=[])[-1].content == "abcd"  # no boundary: half
    with pytest.raises(PerturbationNotApplicable):
        perturb("truncate", convo("x"), seed=0, pool=[])


def test_wrong_answer_changes_only_the_final_number_and_keeps_format():
    for seed in range(30):
        out = perturb("wrong_answer", MATH, seed=seed, pool=[])[-1].content
        assert out.startswith("She has 3 + 4 = 7 apples.\nThe answer is ")
        assert out.endswith(".")
        new = find_final_number(out)
        assert new.value != 1234 and new.value > 0
        assert "," in out.split("The answer is ")[1]  # thousands separator kept
        assert abs(new.value - 1234) <= 9


def test_wrong_answer_is_deterministic_per_seed_and_varies_across_seeds():
    outs = {perturb("wrong_answer", MATH, seed=s, pool=[])[-1].content for s in range(20)}
    assert len(outs) > 2
    assert perturb("wrong_answer", MATH, seed=5, pool=[]) == perturb("wrong_answer", MATH, seed=5, pool=[])


def test_wrong_answer_decimals_negatives_and_small_numbers():
    dec = perturb("wrong_answer", convo("The answer is 2.50 dollars"), seed=1, pool=[])[-1].content
    assert dec.startswith("The answer is ") and dec.endswith(" dollars")
    value = dec.removeprefix("The answer is ").removesuffix(" dollars")
    assert len(value.split(".")[1]) == 2 and value != "2.50"
    neg = perturb("wrong_answer", convo("#### -3"), seed=2, pool=[])[-1].content
    assert neg.startswith("#### -") and neg != "#### -3"
    zero = perturb("wrong_answer", convo("The answer is 0"), seed=3, pool=[])[-1].content
    assert find_final_number(zero).value > 0  # never below zero when moving off 0


def test_wrong_answer_without_a_number_is_not_applicable():
    with pytest.raises(PerturbationNotApplicable, match="no number"):
        perturb("wrong_answer", convo("Salt & Crumb is a nice name."), seed=0, pool=[])
    assert issubclass(PerturbationNotApplicable, ValueError)  # the pipeline records it as an error record


def test_swap_takes_the_first_candidate_with_another_answer():
    """The pool is the candidates in order of preference (the pipeline passes the SwapRing partner)."""
    pool = [MATH, convo(MATH[-1].content), convo("answer B"), convo("answer A")]  # own text is never taken
    out = perturb("swap", MATH, seed=0, pool=pool)
    assert out == [*MATH[:2], Message(role="assistant", content="answer B")]
    assert perturb("swap", MATH, seed=99, pool=pool) == out  # the seed plays no part: only the candidates' order
    assert perturb("swap", MATH, seed=0, pool=list(reversed(pool)))[-1].content == "answer A"
    with pytest.raises(PerturbationNotApplicable, match="no other item"):
        perturb("swap", MATH, seed=0, pool=[MATH])
    with pytest.raises(PerturbationNotApplicable, match="no other item"):
        perturb("swap", MATH, seed=0, pool=[])


def test_swap_ring_depends_only_on_seed_and_ids():
    ids = [f"q{i}" for i in range(20)]
    ring = SwapRing(7, ids)
    assert sorted(ring.order) == sorted(ids)
    assert SwapRing(7, list(reversed(ids))).order == ring.order  # file order / shuffling play no part
    assert SwapRing(8, ids).order != ring.order  # the run seed does
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
        perturb(name, MATH, seed=1, pool=[MATH, convo("other")])
    assert before == MATH
    with pytest.raises(PerturbationNotApplicable, match="does not end with an assistant turn"):
        perturb("generic", MATH[:2], seed=0, pool=[])
