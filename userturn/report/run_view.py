"""What `userturn run` prints when the grid is done, for a 100x40 terminal: the generated user turns beside the
human's real next turn, what the deterministic rules measure without a judge (facts of the text: restatements,
empty turns, role-token leaks, how turns ended, turns unchanged under a perturbation), the report table, the
unjudged notice and the next commands.
"""

from __future__ import annotations

import re
import textwrap
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from userturn.client.probe.controls import CONTROL_MODELS
from userturn.client.terminal import print_trimmed
from userturn.core.records import ProbeRecord, group_key
from userturn.core.results_files import as_paths, describe
from userturn.judges.prelabel import apply_rules, query_and_response
from userturn.report.calibration import calibrate
from userturn.report.calibration_view import calibration_text
from userturn.report.controls import controls_lines
from userturn.report.correction import apply_calibrations
from userturn.report.export import human_turn
from userturn.report.filters import row_order
from userturn.report.label_notice import label_notice
from userturn.report.summary import GroupSummary, load_results, summarise_file
from userturn.report.table import SHORT_LEGEND, fmt_temp, groups_table, totals_line

SHOWN_ITEMS = 4  # items whose turns are printed (every turn: `userturn show RESULTS`)
TURNS_PER_ITEM = 4
LINES_PER_TEXT = 2
INDENT = 18


def _block(head: str, text: str, width: int, lines: int = LINES_PER_TEXT, tail: str = "") -> list[str]:
    """`head` in a column of INDENT, then `text` wrapped beside it on at most `lines` lines, whitespace collapsed,
    '…' where it was cut; `tail` always shown whole at its end (the text is cut to make room for it)."""
    room = max(20, width - INDENT)
    text = " ".join(text.split()) or "(empty)"
    body = textwrap.wrap(f"{text} {tail}".rstrip(), room)
    if len(body) > lines:
        body = textwrap.wrap(text, room)[:lines]
        body[-1] = body[-1][: room - len(tail) - 2 if tail else room - 1].rstrip() + f"… {tail}".rstrip()
    return [f"{head:<{INDENT}}{body[0]}", *(" " * INDENT + line for line in body[1:])]


def _verdict(record: ProbeRecord) -> str:
    label = (f"{record.label} ({record.label_source})" if record.label else
             "judge failed" if record.judge_status == "error" else "unjudged")
    ending = {"stop": "ended by the model", "length": "cut at max_tokens"}.get(record.finish_reason or "", "")
    return f"[{label}{'; ' + ending if ending else ''}]"


def _natural(text: str) -> list[tuple[int, int | str]]:
    """A sort key that orders the numbers inside ids by value (`q2` before `q11`)."""
    return [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part]


def turns_beside_human(records: Sequence[ProbeRecord], width: int, results: str = "RESULTS") -> list[str]:
    """Per item (the first SHOWN_ITEMS by id, whatever the record order): the query, the human's real next turn
    where the dataset has one, then each generated turn with its temperature, perturbation, label and ending.
    Plain lines, none wider than `width`."""
    ok = [r for r in records if r.status == "ok"]
    by_item: dict[tuple[str, str, str], list[ProbeRecord]] = defaultdict(list)
    for r in ok:
        by_item[(r.model, r.dataset, r.item_id)].append(r)
    if not by_item:
        return ["no generated user turn (every request failed; see `error` in the results file)"]
    models = {r.model for r in ok}
    datasets = {r.dataset for r in ok}
    what = f" ({next(iter(models))}, {next(iter(datasets))})" if len(models) == len(datasets) == 1 else ""
    lines = textwrap.wrap(f"Generated user turns{what}, each beside the human's real next turn where the dataset "
                          "has one:", width)
    shown = 0
    first_seen = {key[:2]: n for n, key in reversed(list(enumerate(by_item)))}  # models and datasets in run order
    chosen = sorted(by_item, key=lambda k: (first_seen[k[:2]], _natural(k[2])))[:SHOWN_ITEMS]  # any file order
    for model, dataset, item in chosen:
        members = by_item[(model, dataset, item)]
        members.sort(key=lambda r: (r.perturbation != "none", r.perturbation, r.temperature, r.sample))
        name = f"{model} · {dataset} · " if len(models) > 1 or len(datasets) > 1 else ""
        lines.append("── " + f"{name}item {item} ".ljust(max(10, width - 3), "─")[: width - 3])
        query, _ = query_and_response(members[0])
        lines += _block("user asked", query, width, 1)
        human = human_turn(members[0])
        if human:
            lines += _block("human asked next", human, width)
        for r in members[:TURNS_PER_ITEM]:
            head = f"model T={fmt_temp(r.temperature)} {r.perturbation}"
            if len(head) >= INDENT:
                lines.append(head)
                head = ""
            lines += _block(head, r.user_turn or "", width, tail=_verdict(r))
        shown += min(len(members), TURNS_PER_ITEM)
    if shown < len(ok):
        lines.append(f"({len(ok) - shown} more turns; every turn with its key: userturn show {results})")
    return lines


def offline_facts(records: Sequence[ProbeRecord]) -> list[str]:
    """What the rules and the server's finish reasons tell without any judge, as counts over the generated turns."""
    ok = [r for r in records if r.status == "ok"]
    if not ok:
        return []
    hits: dict[str, int] = defaultdict(int)
    for r in ok:
        hit = apply_rules(r.user_turn, query_and_response(r)[0])
        if hit is not None:
            hits[hit.rule] += 1
    stopped = sum(r.finish_reason == "stop" for r in ok)
    cut = sum(r.finish_reason == "length" for r in ok)
    total = len(ok)
    lines = [f"What the rules measure without a judge ({total} generated turns):",
             f"  restates the query word for word (similarity >= 0.9): {hits['restatement']} of {total}",
             f"  empty: {hits['empty']} of {total}; starts with or writes an assistant header: {hits['role_leak']} "
             f"of {total}",
             f"  ended by the model: {stopped} of {total}; cut at max_tokens: {cut} of {total}"]
    same, pairs = unchanged_under_perturbation(ok)
    if pairs:
        lines.append(f"  the same turn word for word with the answer perturbed as without: {same} of {pairs} pairs")
    return lines


def unchanged_under_perturbation(records: Sequence[ProbeRecord]) -> tuple[int, int]:
    """(pairs whose generated turn is identical, pairs): each perturbed ok record against the unperturbed record of
    the same model, dataset, mode, item, temperature and sample."""
    base = {(group_key(r), r.item_id, r.sample): r.user_turn
            for r in records if r.perturbation == "none" and r.status == "ok"}
    same = pairs = 0
    for r in records:
        if r.perturbation == "none" or r.status != "ok":
            continue
        partner = base.get((group_key(r).unperturbed(), r.item_id, r.sample))
        if partner is None:
            continue
        pairs += 1
        same += " ".join((partner or "").split()) == " ".join((r.user_turn or "").split())
    return same, pairs


RETRY = "rerun the same command"  # what retries a run's failed samples and judgements (one command on the screen)


def print_run_report(console: Console, results: Path | Sequence[Path], gold: Sequence[str] = ()) -> list[GroupSummary]:
    """The whole printout of `userturn run` for its results file (or its shards' files read as one); returns the
    report rows. `gold`: gold label files to calibrate the judges on (the experiment's `gold:`). Judge failures are
    retried as the run's other failures are: by rerunning the run (`RETRY`)."""
    records = [r for r in load_results(results) if r.model not in CONTROL_MODELS]  # generated turns only
    source = describe(results)
    groups = row_order(summarise_file(results).groups)  # the rows `userturn report` shows, settings named
    calibrations = None
    if gold:
        calibrations = calibrate(as_paths(results), gold)
        apply_calibrations(groups, calibrations)
    width = console.width
    for line in turns_beside_human(records, width, source):
        print_trimmed(console, escape(line))
    console.print()
    for line in offline_facts(records):
        print_trimmed(console, escape(line))
    rules_only = not any(g.n > g.rule_labels for g in groups)
    failed = any(g.judge_failures for g in groups)
    title = f"userturn report: {source}" + (f" ({'judge failed' if failed else 'rules only'}: no rate below is a "
                                            "measurement)" if rules_only else "")
    notice = label_notice(groups, results, retry=RETRY)
    if notice and notice.above and failed:
        print_trimmed(console, escape("NOTICE: " + notice.text))
    for line in controls_lines(groups):
        print_trimmed(console, escape(line))
    print_trimmed(console, groups_table(groups, title, width=width))
    print_trimmed(console, SHORT_LEGEND)
    print_trimmed(console, totals_line(groups))
    if notice and not (notice.above and failed):
        print_trimmed(console, escape(notice.text + ("" if failed else
                                                     " (Or put a judge under `judges:` in the experiment file.)")))
    for part in calibration_text(groups, calibrations):
        print_trimmed(console, part)
    page = ("label shares, examples and provenance in one page" if rules_only else
            "the figures and the HTML report (examples, agreement, provenance)")
    flags = "--html report.html" if rules_only else "--html report.html --plots figures/"
    print_trimmed(console, escape(f"Next: every turn with its key: userturn show {source}; {page}: userturn report "
                                  f"{source} {flags}"))
    return groups
