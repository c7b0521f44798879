"""One streaming pass over results files for the report, never a record object per line: the lines come from
`userturn.core.results_reader` (configuration lines, torn tail), each is parsed with orjson, checked for the few
fields the report reads (`_ReportRecord`: the record model cut to them, run once per distinct `_signature`), and kept
as four integers (key hash, interned row, item-id hash, interned outcome). After the pass the last line per key and
configuration counts (`results_reader.last_of_each`): a re-judged record appended later supersedes the earlier one;
the same key under two configurations counts in two rows.
"""

from __future__ import annotations

import functools
import re
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from userturn.core.errors import damaged_line, first_error
from userturn.core.records import GroupKey, JudgeVerdict, ProbeRecord, line_group_key, line_group_values
from userturn.core.results_files import as_paths
from userturn.core.results_reader import config_line, last_of_each, legacy_config, read_lines
from userturn.core.text import digest


class RowId(NamedTuple):
    """What keeps two records in different rows: their `GroupKey` (core.records), configuration and panel.
    `panel`: sorted (judge, prompt sha256) of the LLM judges asked."""

    group: GroupKey
    fingerprint: str | None
    panel: tuple[tuple[str, str | None], ...]


class Outcome(NamedTuple):
    """Everything the report counts about one record (few distinct values: interned)."""

    ok: bool
    label: str | None
    rule: bool  # labelled by a rule
    judge_error: bool  # judge_status == "error"
    correct: bool | None
    self_judged: bool  # labelled by an LLM judge that is the probed model itself
    agreement: tuple[tuple[str, ...], tuple[tuple[str, str], ...]]  # (LLM judges asked, their ok labels)
    quote_reasks: int = 0  # judge replies asked again: only a verdict quoted from the turn, or two verdicts


@functools.lru_cache(maxsize=4096)
def base_name(model: str) -> str:
    """Model name without org prefix, case and an -instruct/-chat/-it suffix (for the self-judged check)."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    return re.sub(r"[-_.:](instruct|chat|it)$", "", name)


def _view(model: type[BaseModel], names: tuple[str, ...], **more: Any) -> type[BaseModel]:
    """`model` cut to the fields `names` (their types, defaults and allowed values taken from it), strict: JSON
    values are taken as they are (`1` is no boolean, `true` no number), as the report counts them."""
    fields: dict[str, Any] = {name: (model.model_fields[name].annotation, model.model_fields[name]) for name in names}
    return create_model(f"Report{model.__name__}", __config__=ConfigDict(strict=True, extra="ignore"),
                        **fields, **more)


# What the report reads of a record line, checked by the record model itself (the lines whose `_signature` is
# already known skip the check: they read the same values).
_ReportRecord = _view(
    ProbeRecord, ("key", "model", "dataset", "item_id", "temperature", "status", "mode", "perturbation", "label",
                  "label_source", "judge_status", "correct", "config_fingerprint"),
    judges=(list[_view(JudgeVerdict, ("judge", "source", "status", "label", "prompt_sha256",  # type: ignore[misc]
                                      "quote_reasks"))], []),
    config=(dict[str, Any] | None, None))  # the configuration a record of schema 2 carries itself


def _problem(d: Any) -> str | None:
    """Why `d` is not a record the report can count, as `field: message`; None when it is one."""
    try:
        _ReportRecord.model_validate(d)
    except ValidationError as exc:
        return first_error(exc, "record")
    return None


def row_and_outcome(d: dict) -> tuple[RowId, Outcome]:
    """The row and the outcome of one checked record dict."""
    llm = [v for v in d.get("judges", ()) if v.get("source", "judge") == "judge"]
    panel = tuple(sorted({(v["judge"], v.get("prompt_sha256")) for v in llm}, key=lambda p: (p[0], p[1] or "")))
    ok_labels = tuple(sorted((v["judge"], v["label"]) for v in llm if v["status"] == "ok" and v.get("label")))
    label = d.get("label")
    source = d.get("label_source")
    model_base = base_name(d["model"])
    self_judged = (label is not None and source in ("judge", "majority")
                   and any(base_name(j) == model_base for j, _ in ok_labels))
    row = RowId(line_group_key(d), d.get("config_fingerprint"), panel)
    outcome = Outcome(d["status"] == "ok", label, label is not None and source == "rule",
                      d.get("judge_status") == "error", d.get("correct"), self_judged,
                      (tuple(sorted({v["judge"] for v in llm})), ok_labels),
                      sum(v.get("quote_reasks", 0) for v in llm))
    return row, outcome


def _usage(d: dict) -> tuple[int, int]:
    """(prompt tokens, completion tokens) the server reported for the record's request; 0 for what is missing."""
    usage = d.get("usage")
    if type(usage) is not dict:
        return 0, 0
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (prompt if type(prompt) is int and prompt > 0 else 0,
            completion if type(completion) is int and completion > 0 else 0)


def _signature(d: dict) -> tuple:
    """What `row_and_outcome` and `_problem` read, except key, item id and config (equal signatures: equal row and
    outcome). Raises KeyError, TypeError or AttributeError on odd shapes."""
    correct = d.get("correct")
    return (line_group_values(d), d["temperature"].__class__, d.get("config_fingerprint"), d["status"],
            d.get("label"), d.get("label_source"), d.get("judge_status"), correct, correct.__class__,
            tuple((v["judge"], v.get("source", "judge"), v["status"], v.get("label"), v.get("prompt_sha256"),
           v.get("quote_reasks"))
                  for v in d.get("judges", ())))


class Scan:
    """Compact columns of every record line seen, in order; `keep_mask` says which line is the last for its key."""

    def __init__(self) -> None:
        self.key_digest = bytearray()  # 16 bytes per line: `digest` of (key, configuration fingerprint)
        self.row = array("i")
        self.item = array("i")  # the item id's index in `item_ids`
        self.item_ids: dict[str, int] = {}
        self.outcome = array("i")
        self.tokens = array("q")  # per line: prompt tokens, completion tokens (0 where the record has no usage)
        self.rows: dict[RowId, int] = {}
        self.outcomes: dict[Outcome, int] = {}
        self.configs: dict[str, dict | None] = {}  # fingerprint -> readable config (first seen)
        self._seen: dict[tuple, tuple[int, int]] = {}

    def add_config(self, d: Any) -> bool | str:
        """Take a configuration line (True), or say it is none (False), or name its problem."""
        try:
            config = config_line(d)
        except ValidationError as exc:
            return first_error(exc, "configuration line")
        if config is None:
            return False
        self.configs.setdefault(config.fingerprint, config.config)
        return True

    def append(self, d: dict, known: tuple[int, int]) -> None:
        """Count one record line: `known` is its (row index, outcome index) from `classify`."""
        self.key_digest += digest((d["key"], d.get("config_fingerprint")))
        self.row.append(known[0])
        self.item.append(self.item_ids.setdefault(d["item_id"], len(self.item_ids)))
        self.outcome.append(known[1])
        self.tokens.extend(_usage(d))

    def classify(self, d: Any) -> tuple[int, int] | str:
        """(row index, outcome index) of one parsed line, or its problem (`field: message`) when it is no record;
        cached by `_signature` (a file has few distinct ones)."""
        try:
            sig = _signature(d)
            known = self._seen.get(sig)
        except (KeyError, TypeError, AttributeError):
            sig, known = None, None
        if known is None or type(d["key"]) is not str or type(d["item_id"]) is not str or not isinstance(
                d.get("config"), dict | None):
            problem = _problem(d)
            if problem is not None:
                return problem
            known = self._intern(d)
            if sig is not None:
                if len(self._seen) > 20_000:  # bounded: a file has few distinct signatures
                    self._seen.clear()
                self._seen[sig] = known
        return known

    def add(self, d: dict) -> None:
        """Count one checked record dict."""
        self.append(d, self._intern(d))

    def _intern(self, d: dict) -> tuple[int, int]:
        row, outcome = row_and_outcome(d)
        old = legacy_config(d)  # a record of schema 2 carries its configuration itself
        if old is not None:
            self.configs.setdefault(old.fingerprint, old.config)
        return self.rows.setdefault(row, len(self.rows)), self.outcomes.setdefault(outcome, len(self.outcomes))

    def __len__(self) -> int:
        return len(self.row)

    def kept_columns(self, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(row, item index, outcome code, (prompt, completion) tokens) of the lines that count, as arrays; the
        per-line columns are then released (they are the largest thing the report holds)."""
        if not len(self.row):
            return np.empty(0, np.int32), np.empty(0, np.int32), np.empty(0, np.int32), np.zeros((0, 2), np.int64)
        rows = np.frombuffer(self.row, dtype=np.int32)[keep]
        items = np.frombuffer(self.item, dtype=np.int32)[keep]
        codes = np.frombuffer(self.outcome, dtype=np.int32)[keep]
        tokens = np.frombuffer(self.tokens, dtype=np.int64).reshape(-1, 2)[keep]
        self.key_digest, self.row, self.item, self.outcome = bytearray(), array("i"), array("i"), array("i")
        self.tokens = array("q")
        return rows, items, codes, tokens

    def keep_mask(self) -> np.ndarray:
        """Boolean per line: True for the last line of its key and configuration (the record that counts)."""
        return last_of_each(np.frombuffer(self.key_digest, dtype="V16") if self.key_digest else np.empty(0, "V16"))


def checked_lines(paths: str | Path | Sequence[str | Path],
                  scan: Scan) -> Iterator[tuple[Path, int, dict, bytes, tuple[int, int]]]:
    """(file, line number, record dict, raw line, (row, outcome) in `scan`) for each record line of the files read
    as one, exactly the lines `scan_files` counts; configuration lines go to `scan`, a torn final line is skipped,
    any other malformed line is a UserError naming file:line."""
    for path in as_paths(paths):
        for number, _, raw, complete in read_lines(path):
            try:
                d = orjson.loads(raw)
                taken = scan.add_config(d)
                if taken is True:
                    continue
                known = taken if taken is not False else scan.classify(d)
            except orjson.JSONDecodeError as exc:
                known = f"invalid JSON: {str(exc).splitlines()[0]}"
            if not isinstance(known, str):
                yield path, number, d, raw, known
            elif complete:
                raise damaged_line(path, number, known)


def scan_files(paths: str | Path | Sequence[str | Path]) -> Scan:
    """One pass over results files, read as their concatenation in order (`userturn.core.results_files`): the
    last line of a key and configuration counts, in whichever file it is. Missing file or malformed line ->
    UserError naming file:line."""
    scan = Scan()
    for _, _, d, _, known in checked_lines(paths, scan):
        scan.append(d, known)
    return scan
