"""userturn: measure interaction awareness by making a model write the next user turn.

The distribution installs one import name. The top-level folders of the repository map onto it:
``client/`` → ``userturn.client``, ``serve/`` → ``userturn.serve``, ``judges/`` → ``userturn.judges``, and the data
folders ``manifests/`` → ``userturn.manifests``, ``experiments/`` → ``userturn.experiments``
(``userturn.core.shipped``).
Inside ``userturn/``: ``core/`` (imported by everything, imports nothing else of userturn), ``cli/`` (the only
argparse code) and ``orchestrate/`` (experiments, post-training runs, target sessions).

The public API is importable from here (``from userturn import ProbeRun, PromptRenderer, launch``); each name loads
its module on first use (PEP 562), so ``import userturn`` stays cheap.
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
    from userturn.core.records import Message, ProbeRecord
    from userturn.core.version import __version__
    from userturn.judges.llm_judge import JudgeConfig
    from userturn.judges.panel import JudgePanel, PanelConfig, make_panel
    from userturn.judges.report import summarise_file
    from userturn.orchestrate.experiment import load_experiment
    from userturn.serve.launcher import launch
    from userturn.serve.manifest import load_manifest

_EXPORTS = {
    "__version__": "userturn.core.version",
    "DatasetItem": "userturn.client.data.dataset",
    "Endpoint": "userturn.client.http.endpoint",
    "EndpointConfig": "userturn.client.http.endpoint",
    "ProbeRun": "userturn.client.probe.pipeline",
    "ProbeSettings": "userturn.client.probe.pipeline",
    "ProbeSummary": "userturn.client.probe.pipeline",
    "PromptRenderer": "userturn.client.render.templates",
    "UserError": "userturn.core.errors",
    "read_records": "userturn.core.jsonl",
    "Message": "userturn.core.records",
    "ProbeRecord": "userturn.core.records",
    "JudgeConfig": "userturn.judges.llm_judge",
    "JudgePanel": "userturn.judges.panel",
    "PanelConfig": "userturn.judges.panel",
    "make_panel": "userturn.judges.panel",
    "summarise_file": "userturn.judges.report",
    "load_experiment": "userturn.orchestrate.experiment",
    "launch": "userturn.serve.launcher",
    "load_manifest": "userturn.serve.manifest",
}

__all__ = [
    "DatasetItem",
    "Endpoint",
    "EndpointConfig",
    "JudgeConfig",
    "JudgePanel",
    "Message",
    "PanelConfig",
    "ProbeRecord",
    "ProbeRun",
    "ProbeSettings",
    "ProbeSummary",
    "PromptRenderer",
    "UserError",
    "__version__",
    "launch",
    "load_experiment",
    "load_manifest",
    "make_panel",
    "read_records",
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
