"""Rewrite module paths from the layout before issue 27 to the one after it, in place (idempotent).

For code written against the old layout (a branch merged after the move): `python .ci/rewrite_imports.py [PATH ...]`
rewrites dotted names (`userturn.errors` -> `userturn.core.errors`, `userturn.client.pipeline` ->
`userturn.client.probe.pipeline`, ...), `from userturn import errors` forms, and repository paths in text
(`client/pipeline.py` -> `client/probe/pipeline.py`) in every .py, .md, .toml and .yaml file under PATH (default:
the repository). Prints the files it changed. Not rewritten: `userturn.client.train`, once a module and now the
package of `trainer`, `data` and `progress` (its old names are in `userturn.client.train.trainer`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ("errors", "records", "taxonomy", "text", "files", "jsonl", "results_lock", "fingerprint", "defaults", "aio",
        "packaged", "shipped", "resume_index", "workers", "gguf_tokenizer")
CLIENT = {"http": ("endpoint", "http_client", "ratelimit", "redact"),
          "render": ("templates", "harmony_render", "stops", "special_tokens", "chat_mode", "prompt_replay"),
          "data": ("dataset", "dataset_scan", "lazy_dataset", "loaders"),
          "probe": ("pipeline", "perturb", "scoring", "seeds", "progress", "dry_run"),
          "analysis": ("export", "rerank", "show")}
MODULES = {
    **{f"userturn.{m}": f"userturn.core.{m}" for m in CORE},
    **{f"userturn.client.{m}": f"userturn.client.{sub}.{m}" for sub, ms in CLIENT.items() for m in ms},
    "userturn.client.train_data": "userturn.client.train.data",
    "userturn.client.train_progress": "userturn.client.train.progress",
    "userturn.client.paths": "userturn.cli.paths", "userturn.client.help_text": "userturn.cli.help_text",
    "userturn.cli_probe": "userturn.cli.probe", "userturn.cli_experiment": "userturn.cli.experiment",
    "userturn.cli_list": "userturn.cli.list", "userturn.cli_show": "userturn.cli.show",
    "userturn.cli_train": "userturn.cli.train", "userturn.argtypes": "userturn.cli.argtypes",
    "userturn.serve.cli": "userturn.cli.serve", "userturn.judges.cli": "userturn.cli.judges",
    "userturn.judges.arguments": "userturn.cli.judge_arguments", "userturn.judges.report_cli": "userturn.cli.report",
    "userturn.experiment": "userturn.orchestrate.experiment", "userturn.posttrain": "userturn.orchestrate.posttrain",
    "userturn.training_run": "userturn.orchestrate.training_run",
    "userturn.run_builder": "userturn.orchestrate.run_builder",
}
FOLDERS = {"userturn.client": "client", "userturn.serve": "serve", "userturn.judges": "judges", "userturn": "userturn"}


def _path(module: str) -> str:
    for package, folder in FOLDERS.items():
        if module.startswith(package + "."):
            return folder + "/" + module[len(package) + 1:].replace(".", "/")
    raise ValueError(module)


def _file(module: str) -> str:
    return _path(module) + ("" if module.endswith("loaders") else ".py")


PATHS = {_file(old): _file(new) for old, new in MODULES.items()}
PATHS.update({"userturn/cli.py": "userturn/cli/app.py", "client/train.py": "client/train/trainer.py"})
MODULE_RE = re.compile(r"(?<![\w.])(" + "|".join(re.escape(m) for m in sorted(MODULES, key=len, reverse=True))
                       + r")(?!\w)")
PATH_RE = re.compile(r"(?<![\w./])(" + "|".join(re.escape(p) for p in sorted(PATHS, key=len, reverse=True))
                     + r")(?![\w])")
FROM_RE = re.compile(r"^(\s*)from (userturn(?:\.\w+)*) import ([\w, ]+?)(\s*(?:#.*)?)$", re.M)


def _from(match: re.Match[str]) -> str:
    indent, package, names, tail = match.groups()
    targets: dict[str, list[str]] = {}
    for item in (n.strip() for n in names.split(",") if n.strip()):
        name = item.split(" as ")[0].strip()
        full = f"{package}.{name}"
        if full in MODULES:
            targets.setdefault(MODULES[full].rpartition(".")[0], []).append(item)
        elif package == "userturn" and name == "__version__":
            targets.setdefault("userturn.core.version", []).append(item)
        else:
            targets.setdefault(package, []).append(item)
    if list(targets) == [package]:
        return match.group(0)
    return "\n".join(f"{indent}from {p} import {', '.join(i)}" for p, i in targets.items()) + tail


def rewrite(text: str, python: bool = True) -> str:
    """`text` with old module paths and file paths replaced by new ones; unchanged when it has none."""
    if python:
        text = FROM_RE.sub(_from, text)
    text = MODULE_RE.sub(lambda m: MODULES[m.group(1)], text)
    return PATH_RE.sub(lambda m: PATHS[m.group(1)], text)


def main(argv: list[str]) -> int:
    for root in [Path(a) for a in argv] or [ROOT]:
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            skipped = {".venv", ".git", ".ci", "build", "fixtures"}
            if path.suffix not in (".py", ".md", ".toml", ".yaml") or skipped & set(path.parts):
                continue
            old = path.read_text(encoding="utf-8")
            new = rewrite(old, path.suffix == ".py")
            if new != old:
                path.write_text(new, encoding="utf-8")
                print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
