"""Per-sample seeds: deterministic, distinct across samples/temperatures/items, in int32 range."""

from __future__ import annotations

from userturn.client.probe.seeds import SEED_MODULUS, sample_seed


def test_deterministic_and_in_range():
    assert sample_seed(0, "q1", 1.0, 3) == sample_seed(0, "q1", 1.0, 3)
    assert 0 <= sample_seed(123, "q1", 0.7, 0) < SEED_MODULUS


def test_every_component_changes_the_seed():
    base = sample_seed(0, "q1", 1.0, 0)
    variants = [
        sample_seed(1, "q1", 1.0, 0),
        sample_seed(0, "q2", 1.0, 0),
        sample_seed(0, "q1", 0.7, 0),
        sample_seed(0, "q1", 1.0, 1),
        sample_seed(0, "q1", 1.0, 0, perturbation="wrong_answer"),
        sample_seed(0, "q1", 1.0, 0, mode="chat"),
    ]
    assert base not in variants and len(set(variants)) == len(variants)


def test_k_samples_never_collapse():
    seeds = {sample_seed(0, f"q{i}", t, k) for i in range(50) for t in (0.3, 1.0) for k in range(8)}
    assert len(seeds) == 50 * 2 * 8


def test_temperature_written_differently_is_the_same_condition():
    assert sample_seed(0, "q", 1, 0) == sample_seed(0, "q", 1.0, 0)
