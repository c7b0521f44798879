"""The perturbations of the assistant turn: one module each in this package, named after the perturbation. A module
defines `PERTURBATION`, a `base.Perturbation` (name, summary, order, whether it needs a partner item, `apply`);
adding one is adding its module. Validation, help text and `userturn list` read the registry.

`names()` lists them without importing any (the command line's help is built at every start); `REGISTRY`,
`PERTURBATIONS` and `SUMMARIES` import them all, on first use."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from userturn.client.probe.perturbations.base import Perturbation

_SUPPORT = {"base", "partners"}  # modules of this package that define no perturbation


def names() -> list[str]:
    """Every perturbation's name (its module's), `none` first, the rest alphabetical; imports none of them."""
    found = sorted(info.name for info in pkgutil.iter_modules(__path__) if info.name not in _SUPPORT)
    return sorted(found, key=lambda name: name != "none")


@cache
def registry() -> dict[str, Perturbation]:
    """Name -> perturbation, in each one's `order`."""
    from userturn.client.probe.perturbations.base import Perturbation

    found = []
    for name in names():
        module = importlib.import_module(f"{__name__}.{name}")
        perturbation = getattr(module, "PERTURBATION", None)
        if not isinstance(perturbation, Perturbation) or perturbation.name != name:
            raise TypeError(f"{module.__name__} must define PERTURBATION, a Perturbation named {name!r}")
        found.append(perturbation)
    return {p.name: p for p in sorted(found, key=lambda p: (p.order, p.name))}


def needs_partner(perturbations: Iterable[str]) -> bool:
    """Whether any of `perturbations` puts in a partner item's assistant turn (the run then needs every item of the
    dataset, not only the selected ones, and a partner ring)."""
    return any(registry()[name].needs_partner for name in perturbations if name in registry())


def __getattr__(attribute: str) -> Any:
    """REGISTRY, PERTURBATIONS (names in order), SUMMARIES, and the base names, on first use."""
    if attribute == "REGISTRY":
        return registry()
    if attribute == "PERTURBATIONS":
        return tuple(registry())
    if attribute == "SUMMARIES":
        return {name: p.summary for name, p in registry().items()}
    if attribute in ("PARTNER_META", "Perturbation", "PerturbationNotApplicable", "Perturbed"):
        from userturn.client.probe.perturbations import base

        return getattr(base, attribute)
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")
