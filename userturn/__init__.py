"""userturn: measure interaction awareness by making a model write the next user turn.

The repository's ``client/``, ``serve/`` and ``judges/`` folders install as ``userturn.client``, ``.serve`` and
``.judges``; ``userturn/`` holds ``core/`` (imports nothing else of userturn), ``cli/`` and ``orchestrate/``.
The public API is importable from here; each name loads its module on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from userturn.client.data.dataset import DatasetItem
    from userturn.client.http.endpoint import Endpoint, EndpointConfig
    from userturn.client.probe.pipeline import ProbeRun, ProbeSettings, ProbeSummary
    from userturn.client.render.templates import PromptRenderer
    from userturn.core.errors import UserError
    from userturn.core.jsonl import read_records
    from userturn.core.options import Options
    from userturn.core.records import Message, ProbeRecord
    from userturn.core.version import __version__
    from userturn.judges.llm_judge import JudgeConfig
    from userturn.judges.panel import JudgePanel, PanelConfig, make_panel
    from userturn.orchestrate.api import RunResult, probe, run
    from userturn.orchestrate.experiment import Experiment, load_experiment
    from userturn.report.frames import records_df, rows_df
    from userturn.report.summary import summarise_file
    from userturn.serve.launcher import launch
    from userturn.serve.manifest import load_manifest

_EXPORTS = {name: module for module, names in {
    "userturn.core.version": ["__version__"],
    "userturn.client.data.dataset": ["DatasetItem"],
    "userturn.client.http.endpoint": ["Endpoint", "EndpointConfig"],
    "userturn.client.probe.pipeline": ["ProbeRun", "ProbeSettings", "ProbeSummary"],
    "userturn.client.render.templates": ["PromptRenderer"],
    "userturn.core.errors": ["UserError"],
    "userturn.core.jsonl": ["read_records"],
    "userturn.core.records": ["Message", "ProbeRecord"],
    "userturn.judges.llm_judge": ["JudgeConfig"],
    "userturn.judges.panel": ["JudgePanel", "PanelConfig", "make_panel"],
    "userturn.report.summary": ["summarise_file"],
    "userturn.report.frames": ["records_df", "rows_df"],
    "userturn.core.options": ["Options"],
    "userturn.orchestrate.api": ["RunResult", "probe", "run"],
    "userturn.orchestrate.experiment": ["Experiment", "load_experiment"],
    "userturn.serve.launcher": ["launch"],
    "userturn.serve.manifest": ["load_manifest"],
}.items() for name in names}

__all__ = [
    "DatasetItem",
    "Endpoint",
    "EndpointConfig",
    "Experiment",
    "JudgeConfig",
    "JudgePanel",
    "Message",
    "Options",
    "PanelConfig",
    "ProbeRecord",
    "ProbeRun",
    "ProbeSettings",
    "ProbeSummary",
    "PromptRenderer",
    "RunResult",
    "UserError",
    "__version__",
    "launch",
    "load_experiment",
    "load_manifest",
    "make_panel",
    "probe",
    "read_records",
    "records_df",
    "rows_df",
    "run",
    "summarise_file",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'userturn' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
