"""Offline stand-ins for the paper grid's hub inputs, written where the real code looks for them.

* `hub_tokenizer(hub, repo, files)`: a snapshot of a model repository in the Hugging Face hub cache
  (`$HF_HOME/hub/models--OWNER--NAME/{refs/main,snapshots/SHA/}`), as `hf_hub_download` leaves it after a download;
  with HF_HUB_OFFLINE=1 the tokenizer code reads it and tries nothing else.
* `hub_dataset(cache, repo, config, split, rows, data_files)`: one split of a hub dataset in the `datasets` cache
  (`$HF_HOME/datasets/OWNER___NAME/CONFIG_ID/0.0.0/HASH/{dataset_info.json, NAME-SPLIT.arrow}`), the layout
  `datasets.load_dataset` writes after a download and reads back offline (its `packaged_modules.cache` builder, which
  names the config folder as `BuilderConfig.create_config_id` does).
* `punkt_tab(nltk_data)`: NLTK's punkt_tab English model for IFEval's sentence checks, untrained (no
  abbreviations, collocations or sentence starters: it splits at every period), in `$NLTK_DATA/tokenizers/punkt_tab`.
* `paper_rows(name, n)`: n rows per dataset in the hub's own schema, from tests/fixtures/datasets.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parents[1] / "fixtures" / "datasets"
HARMONY_SPECIALS = {"<|startoftext|>": 199998, "<|endoftext|>": 199999, "<|return|>": 200002,
                    "<|constrain|>": 200003, "<|channel|>": 200005, "<|start|>": 200006, "<|end|>": 200007,
                    "<|message|>": 200008, "<|call|>": 200012}


def hub_tokenizer(hub: Path, repo: str, files: dict[str, Path | str]) -> Path:
    """Put `files` (name -> a file to copy, or text) in the hub cache as repo's snapshot at main; its folder."""
    root = hub / f"models--{repo.replace('/', '--')}"
    sha = hashlib.sha1(repo.encode()).hexdigest()
    snapshot = root / "snapshots" / sha
    snapshot.mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(sha)
    for name, source in files.items():
        if isinstance(source, Path):
            shutil.copy(source, snapshot / name)
        else:
            (snapshot / name).write_text(source)
    return snapshot


def gpt_oss_tokenizer_config() -> str:
    """A gpt-oss tokenizer_config.json: the harmony special tokens (o200k_harmony ids); no template (harmony
    renders gpt-oss)."""
    added = {str(i): {"content": t, "special": True, "lstrip": False, "rstrip": False, "normalized": False,
                      "single_word": False} for t, i in HARMONY_SPECIALS.items()}
    return json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|startoftext|>",
                       "eos_token": "<|return|>", "pad_token": "<|endoftext|>", "added_tokens_decoder": added,
                       "model_max_length": 131072})


def hub_dataset(cache: Path, repo: str, config: str | None, split: str, rows: list[dict[str, Any]],
                data_files: str | None = None) -> Path:
    """Write `rows` as `repo`'s split in the `datasets` cache, where load_dataset(repo, config, split=split,
    data_files=data_files) finds it offline; the split's folder."""
    import datasets
    from datasets.arrow_writer import ArrowWriter
    from datasets.naming import camelcase_to_snakecase

    name = camelcase_to_snakecase(repo.split("/")[-1])
    kwargs = {"data_files": data_files} if data_files else {}
    config_id = datasets.BuilderConfig(config or "default").create_config_id(config_kwargs=kwargs) if kwargs \
        else config or "default"
    folder = cache / f"{repo.split('/')[0]}___{name}" / config_id / "0.0.0" / "standin"
    folder.mkdir(parents=True, exist_ok=True)
    table = datasets.Dataset.from_list(rows)
    with ArrowWriter(path=str(folder / f"{name}-{split}.arrow"), features=table.features) as writer:
        writer.write_table(table.data.table)
        count, size = writer.finalize()
    info = datasets.DatasetInfo(features=table.features, dataset_name=name, config_name=config or "default",
                                version="0.0.0", splits=datasets.SplitDict({split: datasets.SplitInfo(
                                    name=split, num_bytes=size, num_examples=count, dataset_name=name)}))
    info.write_to_directory(str(folder))
    return folder


def punkt_tab(nltk_data: Path) -> Path:
    """An untrained Punkt English model where NLTK looks for punkt_tab under `nltk_data`; its folder."""
    folder = nltk_data / "tokenizers" / "punkt_tab" / "english"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("abbrev_types.txt", "collocations.tab", "sent_starters.txt", "ortho_context.tab"):
        (folder / name).write_text("")
    return folder


def paper_rows(name: str, n: int) -> list[dict[str, Any]]:
    """n distinct rows of dataset `name` in its hub schema, varied from the fixture rows."""
    base = [json.loads(line) for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines() if line.strip()]
    rows = []
    for i in range(n):
        row = json.loads(json.dumps(base[i % len(base)]))
        if name == "gsm8k":
            row["question"] = f"{row['question']} (variant {i})"
        elif name == "ifeval":
            row["key"] = 2000 + i
            row["prompt"] = f"{row['prompt']} Topic {i}."
        elif name in ("healthbench", "coval"):
            row["prompt_id"] = f"{row['prompt_id']}-{i}"
            messages = row["prompt"]["messages"] if name == "coval" else row["prompt"]
            messages[-1]["content"] += f" (case {i})"
            if name == "coval":
                for response in row["responses"]:
                    response["messages"][-1]["content"] += f" (case {i})"
        rows.append(row)
    return rows
