"""Deterministic per-sample seeds: k samples at T>0 never collapse into one."""

from __future__ import annotations

import hashlib

from userturn.core.records import temperature_value

SEED_MODULUS = 2**31 - 1  # fits every server's seed field (int32)


def sample_seed(
    base_seed: int, item_id: str, temperature: float, sample: int, perturbation: str = "none", mode: str = "raw"
) -> int:
    """Seed for one sample, derived from the run seed, the item, temperature, sample index (and condition)."""
    t = temperature_value(temperature)  # `:g` of it is `:g` of the temperature: the seeds of every existing file
    material = f"{base_seed}\x1f{item_id}\x1f{t:g}\x1f{sample}\x1f{perturbation}\x1f{mode}"
    digest = hashlib.blake2b(material.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % SEED_MODULUS


def perturbation_seed(base_seed: int, item_id: str, perturbation: str) -> int:
    """The seed a perturbation of an item draws from: keyed by the item's identity only, so the same wrong answer
    (or partner) under any --limit or shuffle, in the probe and wherever its outcome is decided again offline."""
    return sample_seed(base_seed, item_id, 0, 0, perturbation)
