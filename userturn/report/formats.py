"""`userturn report --format csv|markdown|latex`: CSV with every count and the rates as fractions, for analysis;
a Markdown pipe table and a LaTeX `booktabs` tabular with the terminal table's columns, for a paper. The Markdown
and LaTeX tables carry the report's caveat (`report.label_notice`: judge failures, rules only, unjudged records)
above the table.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Sequence

from userturn.core.taxonomy import LABELS
from userturn.report.summary import GroupSummary
from userturn.report.table import corrected_cell, delta_cell, fmt_temp, interval_cell

CSV_COLUMNS = ["model", "dataset", "mode", "perturbation", "temperature", "settings", "n", "items", "followups",
               "followup_rate", "ci_low", "ci_high", "followup_corrected", "corrected_ci_low", "corrected_ci_high",
               "delta_vs_none", "delta_ci_low", "delta_ci_high", "delta_items",
               "accuracy", "accuracy_n", "records", "judge_failures", "generation_errors", "unjudged", "rule_labels",
               "self_judged"]


def to_csv(groups: Sequence[GroupSummary], caveat: str | None = None) -> str:
    """One CSV row per report row: the counts, the rates as fractions, one `label:<name>` column per label, the
    judges (`;`-separated) and the configuration fingerprint. Empty cell = no value. No caption (plain CSV):
    `caveat` is not written; the counts say it (judge_failures, unjudged, rule_labels)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*CSV_COLUMNS, *(f"label:{label}" for label in LABELS), "judges", "config_fingerprint"])
    for g in groups:
        values = g.model_dump()
        writer.writerow([("" if values[c] is None else values[c]) for c in CSV_COLUMNS]
                        + [g.labels[label] for label in LABELS] + [";".join(g.judges), g.config_fingerprint or ""])
    return buffer.getvalue()


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


CORRECTED = "corrected % [95% CI]"
HEADER = ["model", "dataset", "mode", "perturbation", "settings", "T", "n", "follow-up % [95% CI]", CORRECTED,
          "Δ vs none pp [95% CI]", "accuracy %", "excluded"]  # mode, settings, corrected only where rows have them
NUMERIC = {"T", "n", "follow-up % [95% CI]", CORRECTED, "Δ vs none pp [95% CI]", "accuracy %", "excluded"}
NOTE = ("n = labelled records; follow-up = genuine_followup / n with an item-clustered Wilson 95% CI; Δ vs none = "
        "paired difference to the unperturbed row over shared items (percentage points); excluded = judge failures "
        "/ generation errors / unjudged records, all outside n")
CORRECTED_NOTE = ("; corrected = the follow-up rate corrected for the judge panel's error measured on gold labels "
                  "(Rogan-Gladen), 95% CI from sampling and calibration error together; n/a: the panel's Se + Sp - 1 "
                  "is too small to correct")


def _cells(groups: Sequence[GroupSummary]) -> tuple[list[str], list[list[str]]]:
    """The paper table's header and rows (mode and settings columns only when some rows differ in them)."""
    hidden = {"mode"} if len({g.mode for g in groups}) <= 1 else set()
    hidden |= set() if any(g.settings for g in groups) else {"settings"}
    hidden |= set() if any(g.calibration is not None for g in groups) else {CORRECTED}
    shown = [i for i, name in enumerate(HEADER) if name not in hidden]
    rows = [[g.model, g.dataset, g.mode, g.perturbation, g.settings, fmt_temp(g.temperature), str(g.n),
             "—" if g.followup_rate is None else f"{_pct(g.followup_rate)} {interval_cell(g.ci_low, g.ci_high)}",
             corrected_cell(g, " ").replace("%", ""), delta_cell(g).replace("\n", " "), _pct(g.accuracy),
             f"{g.judge_failures}/{g.generation_errors}/{g.unjudged}"] for g in groups]
    return [HEADER[i] for i in shown], [[row[i] for i in shown] for row in rows]


def _note(groups: Sequence[GroupSummary]) -> str:
    return NOTE + (CORRECTED_NOTE if any(g.calibration is not None for g in groups) else "")


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|")


def to_markdown(groups: Sequence[GroupSummary], caveat: str | None = None) -> str:
    """A GitHub-flavoured pipe table (numbers right-aligned), the `caveat` above it as a quoted paragraph, and the
    note on what the columns mean."""
    header, rows = _cells(groups)
    lines = [f"> **Caveat:** {_md_escape(caveat)}", ""] if caveat else []
    lines += ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if h in NUMERIC else "---" for h in header) + "|"]
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + f"\n\n{_note(groups)}.\n"


LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "—": "---",
                 "Δ": r"$\Delta$"}


def latex_escape(text: str) -> str:
    """Text safe in a LaTeX document (special characters escaped; the em dash and Δ spelled for pdflatex)."""
    return "".join(LATEX_SPECIAL.get(ch, ch) for ch in text)


_NEGATIVE = re.compile(r"-(?=\d)")


def latex_number(text: str) -> str:
    """A numeric cell for LaTeX: escaped, each negative sign a real minus (`$-$`), not a hyphen."""
    return _NEGATIVE.sub("$-$", latex_escape(text))


def to_latex(groups: Sequence[GroupSummary], caveat: str | None = None) -> str:
    """A `booktabs` tabular (needs \\usepackage{booktabs}); the `caveat` (as `% CAVEAT:`) and the note as comments
    above it."""
    header, rows = _cells(groups)
    spec = "".join("r" if h in NUMERIC else "l" for h in header)
    lines = [f"% CAVEAT: {' '.join(caveat.split())}"] if caveat else []
    lines += [f"% {_note(groups)}", f"\\begin{{tabular}}{{{spec}}}", r"\toprule",
              " & ".join(latex_escape(h) for h in header) + r" \\", r"\midrule"]
    lines += [" & ".join(latex_number(c) if h in NUMERIC else latex_escape(c) for h, c in zip(header, row, strict=True))
              + r" \\" for row in rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


RENDERERS: dict[str, Callable[[Sequence[GroupSummary], str | None], str]] = {
    "csv": to_csv, "markdown": to_markdown, "latex": to_latex}
FORMATS = ("table", *RENDERERS)  # `report --format`: the terminal table or a renderer
