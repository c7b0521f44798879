"""Follow-up rates corrected for the judge's measured error (Rogan & Gladen 1978): with sensitivity Se and
specificity Sp of the judge against gold labels, an observed rate p estimates the true rate

    pi = (p + Sp - 1) / (Se + Sp - 1), clipped to [0, 1].

The 95% interval carries both uncertainties, by a seeded parametric bootstrap of `DRAWS` draws: the observed rate
from Beta(p n_eff + 1/2, (1 - p) n_eff + 1/2) at the row's item-clustered effective sample size n_eff = n / deff
(the report's own interval, `stats.clustered_rate`, uses the same n_eff), Se from Beta(TP + 1/2, FN + 1/2) and Sp
from Beta(TN + 1/2, FP + 1/2) (Jeffreys posteriors, defined at 0 and 1); each draw is corrected as above and the
interval is the draws' 2.5th and 97.5th percentiles. A draw whose Se + Sp - 1 is at or below 0 (a judge no better
than chance) is taken at its limit from above: 1 when p + Sp - 1 > 0, else 0, which widens the interval towards
the ends, as it should. No correction when the point Se + Sp - 1 is below `MIN_YOUDEN` (the correction would
multiply the rate's error by more than 1 / MIN_YOUDEN = 5).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from userturn.report.calibration import Calibration, Calibrations
from userturn.report.summary import GroupSummary

MIN_YOUDEN = 0.2  # Se + Sp - 1 below this: too close to a chance judge to correct
DRAWS = 4000
SEED = 20260402  # one fixed seed: the same row gives the same interval on every run


class Corrected(BaseModel):
    """A corrected rate and its interval, or why there is none (`note`)."""

    rate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    note: str | None = None


def rogan_gladen(p: float, sensitivity: float, specificity: float) -> float:
    """(p + Sp - 1) / (Se + Sp - 1) clipped to [0, 1]; ValueError when Se + Sp - 1 <= 0."""
    youden = sensitivity + specificity - 1
    if youden <= 0:
        raise ValueError(f"Se + Sp - 1 = {youden:.3f}: the judge is no better than chance")
    return min(1.0, max(0.0, (p + specificity - 1) / youden))


def why_not(calibration: Calibration | None) -> str | None:
    """Why a row of this panel gets no corrected rate; None when it can be corrected."""
    if calibration is None:
        return "no gold label matches a record this judge panel labelled"
    if calibration.sensitivity is None:
        return "no gold genuine follow-up among this panel's gold keys: sensitivity unknown"
    if calibration.specificity is None:
        return "no gold key that is not a genuine follow-up: specificity unknown"
    youden = calibration.sensitivity + calibration.specificity - 1
    if youden < MIN_YOUDEN:
        return f"Se + Sp - 1 = {youden:.2f} is below {MIN_YOUDEN}: the judge is too close to chance to correct"
    return None


def correct(rate: float | None, n: int, design_effect: float | None, calibration: Calibration | None) -> Corrected:
    """The Rogan-Gladen rate of a row (its rate over n labelled records with the design effect of its items) and its
    bootstrap interval; a note instead where there is no rate or the calibration cannot correct it."""
    note = why_not(calibration)
    if note is not None:
        return Corrected(note=note)
    assert calibration is not None and calibration.sensitivity is not None and calibration.specificity is not None
    if rate is None or n == 0:
        return Corrected(note="no labelled record")
    point = rogan_gladen(rate, calibration.sensitivity, calibration.specificity)
    n_eff = n / (design_effect or 1.0)
    rng = np.random.default_rng(SEED)
    p = rng.beta(rate * n_eff + 0.5, (1 - rate) * n_eff + 0.5, DRAWS)
    se = rng.beta(calibration.true_positives + 0.5, calibration.false_negatives + 0.5, DRAWS)
    sp = rng.beta(calibration.true_negatives + 0.5, calibration.false_positives + 0.5, DRAWS)
    draws = np.clip((p + sp - 1) / np.maximum(se + sp - 1, 1e-12), 0.0, 1.0)
    low, high = np.quantile(draws, [0.025, 0.975])
    return Corrected(rate=point, ci_low=float(low), ci_high=float(high))


def apply_calibrations(groups: list[GroupSummary], calibrations: Calibrations) -> None:
    """Give every row its panel's calibration and corrected rate (or the note saying why there is none)."""
    for group in groups:
        group.calibration = calibrations.of(group.judge_panel)
        fixed = correct(group.followup_rate, group.n, group.design_effect, group.calibration)
        group.followup_corrected, group.corrected_note = fixed.rate, fixed.note
        group.corrected_ci_low, group.corrected_ci_high = fixed.ci_low, fixed.ci_high
