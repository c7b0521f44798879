"""`userturn probe` and `userturn.probe()` as a grid of one cell: one model (a manifest, or base URLs and a model
name) on one dataset in one mode, into one results file; the settings that contradict each other are refused here,
before any dataset loads or any server launches."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from userturn.core.errors import UserError
from userturn.core.options import Options
from userturn.core.shards import Shard
from userturn.orchestrate.grid_spec import Grid, GridDataset, GridModel
from userturn.orchestrate.run_builder import Mode, TargetSource

if TYPE_CHECKING:
    from userturn.judges.panel import PanelConfig


def check_conflicts(target: TargetSource, options: Options, mode: Mode,
                    assistant_from: Literal["dataset", "model"] | None) -> None:
    """Settings that contradict each other (named by their flags), refused before anything loads or launches."""
    if target.manifest and target.base_urls:
        raise UserError("--manifest launches its own server and --base-url points elsewhere: give one of them "
                        "(--manifest NAME, or --base-url URL --model NAME)")
    if target.launcher and not target.manifest:
        raise UserError("--launcher goes with --manifest (it says where the manifest's server runs)")
    if not target.manifest and not target.base_urls:
        raise UserError("--base-url or --manifest is required")
    if assistant_from == "dataset":
        given = [flag for flag, value in (("--assistant-temperature", options.assistant_temperature),
                                          ("--assistant-max-tokens", options.assistant_max_tokens))
                 if value is not None]
        if given:
            raise UserError(f"{' and '.join(given)} set how the model writes the assistant turn, but "
                            "--assistant-from dataset takes it from the dataset")
    if mode == "chat" and (options.chat_template or options.renderer == "harmony"):
        flag = "--chat-template" if options.chat_template else "--renderer harmony"
        raise UserError(f"{flag} renders raw prompts; --mode chat sends messages to the server's chat API")


def probe_grid(*, dataset: str, out: str | Path, target: TargetSource, options: Options | None = None,
               mode: Mode = "raw", perturbations: Sequence[str] | None = None,
               assistant_from: Literal["dataset", "model"] | None = None, dataset_name: str | None = None,
               limit: int | None = None, shuffle_seed: int | None = None, shard: Shard | None = None,
               judges: PanelConfig | None = None, progress: bool = True) -> Grid:
    """The one-cell grid of a probe (a `shard`'s items into `out` with `.shard-I-of-N` before its suffix);
    `judges`: the inline judge panel, checked before anything is generated."""
    from userturn.client.probe.perturb import validate

    options = options or Options()
    check_conflicts(target, options, mode, assistant_from)
    chosen = validate(list(perturbations or ["none"]))
    label = target.model or (Path(target.manifest).stem if target.manifest else "model")
    return Grid(models=(GridModel(label=label, source=target, layers=(options,), model=target.model),),
                datasets=(GridDataset(spec=dataset, name=dataset_name, limit=limit, shuffle_seed=shuffle_seed,
                                      assistant_from=assistant_from),),
                results=Path(out), modes=(mode,), perturbations=tuple(chosen), shard=shard,
                judges=None if judges is None else _panel_factory(judges), progress=progress)


def _panel_factory(config: PanelConfig) -> Any:
    """The grid's judge-panel factory for a probe: the panel its --judge-* flags describe, whatever the model."""
    from userturn.judges.panel import make_panel

    return lambda model, base_url, options: make_panel(config)
