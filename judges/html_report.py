"""The HTML report: one self-contained file (plots inlined as base64 PNG), every text HTML-escaped."""

from __future__ import annotations

import base64
import bisect
import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import jinja2
import numpy as np
from pydantic import ValidationError
from userturn.client.export import human_turn
from userturn.judges.agreement import PanelAgreement
from userturn.judges.prelabel import query_and_response
from userturn.judges.report import GroupSummary, is_self_judged
from userturn.judges.report_scan import iter_checked
from userturn.judges.report_table import fmt_ci, fmt_delta, fmt_rate, fmt_temp

from userturn.errors import UserError, first_error
from userturn.records import ProbeRecord
from userturn.taxonomy import DESCRIPTIONS, LABELS, SHORT

SAMPLES_PER_LABEL = 5
CLIP = 600

TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>userturn report: {{ source }}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3} td.num{text-align:right} .self{color:#b00;font-weight:bold}
pre{white-space:pre-wrap;margin:0;font-size:12px;max-width:520px} img{max-width:100%;border:1px solid #eee}
.note{color:#555;font-size:13px}
</style></head><body>
<h1>userturn report</h1>
<p class="note">{{ source }} · {{ total }} records · generated {{ generated }}</p>
<h2>Follow-up rate by group</h2>
<p class="note">rate = genuine_followup / n (labelled records); items = distinct items behind n; 95% CI = Wilson
score interval at the item-clustered effective sample size (the samples of one item are not independent).
Δ vs none = this row's rate minus the none row's over the items labelled under both, in percentage points, with a
paired item-level 95% interval (Newcombe's method 10). Judge failures, generation errors and unjudged records are
outside n. Raw and chat mode, different generation configurations and different judge panels are separate rows.</p>
<table><tr><th>model</th><th>dataset</th><th>mode</th><th>perturbation</th><th>temp</th>
{% if any_settings %}<th>settings</th>{% endif %}<th>n</th><th>items</th>
<th>follow-ups</th><th>rate</th><th>95% CI</th><th>Δ vs none (95% CI)</th>
<th>judge failures</th><th>generation errors</th><th>unjudged</th>
<th>accuracy</th>{% for l in labels %}<th title="{{ l }}">{{ short[l] }}</th>{% endfor %}<th>judged by</th></tr>
{% for g in groups %}<tr><td>{{ g.model }}</td><td>{{ g.dataset }}</td><td>{{ g.mode }}</td>
<td>{{ g.perturbation }}</td><td class="num">{{ temp(g.temperature) }}</td>
{% if any_settings %}<td>{{ g.settings }}</td>{% endif %}<td class="num">{{ g.n }}</td>
<td class="num">{{ g.items }}</td>
<td class="num">{{ g.followups }}</td><td class="num">{{ rate(g.followup_rate) }}</td><td class="num">{{ ci(g) }}</td>
<td class="num" title="{{ g.delta_note or '' }}">{{ delta(g) }}</td>
<td class="num">{{ g.judge_failures }}</td>
<td class="num">{{ g.generation_errors }}</td><td class="num">{{ g.unjudged }}</td>
<td class="num">{{ "—" if g.accuracy is none else rate(g.accuracy) ~ " (n=" ~ g.accuracy_n ~ ")" }}</td>
{% for l in labels %}<td class="num">{{ g.labels[l] }}</td>{% endfor %}
<td>{{ g.judges|join(", ") or ("rules" if g.rule_labels else "—") }}{% if g.self_judged %}
<span class="self" title="judged by the probed model itself">self-judged {{ g.self_judged }}/{{ g.n }}</span>
{% endif %}</td></tr>
{% endfor %}</table>
{% if any_self %}<p class="self">self-judged: some labels come from the same model that was probed; use an
independent judge for reported numbers.</p>{% endif %}
<table><tr><th>code</th><th>label</th><th>meaning</th></tr>
{% for l in labels %}<tr><td>{{ short[l] }}</td><td>{{ l }}</td><td>{{ descriptions[l] }}</td></tr>{% endfor %}</table>
{% if agreements %}<h2>Judge agreement</h2>
<table><tr><th>judges</th><th>items</th><th>agreement</th><th>kappa</th></tr>
{% for agreement in agreements %}
<tr><td>{{ agreement.judges|join(", ") }}</td><td class="num">{{ agreement.items }}</td>
<td class="num">{{ rate(agreement.percent_agreement) }}</td>
<td class="num">{{ kappa(agreement.kappa) }} ({{ agreement.kappa_kind }})</td></tr>
{% if agreement.pairs|length > 1 %}{% for p in agreement.pairs %}<tr><td>{{ p.judges|join(" vs ") }}</td>
<td class="num">{{ p.items }}</td><td class="num">{{ rate(p.percent_agreement) }}</td>
<td class="num">{{ kappa(p.cohen_kappa) }} (cohen)</td></tr>{% endfor %}{% endif %}{% endfor %}</table>{% endif %}
{% if figures %}<h2>Figures</h2>
{% for name, b64 in figures.items() %}<h3>{{ name }}</h3><img alt="{{ name }}" src="data:image/png;base64,{{ b64 }}">
{% endfor %}{% else %}<p class="note">No figures: {{ no_figures }}</p>{% endif %}
<h2>Sample generated user turns per label</h2>
{% for label, rows in samples.items() %}<h3>{{ label }} ({{ rows|length }} shown)</h3>
<table><tr><th>record</th><th>query</th><th>assistant response</th><th>generated user turn</th>
{% if any_human %}<th title="the human-written next turn the dataset carries (meta.second_turn)">human next turn
</th>{% endif %}<th>label by</th><th>rationale</th></tr>
{% for s in rows %}<tr><td>{{ s.key }}</td><td><pre>{{ s.query }}</pre></td><td><pre>{{ s.response }}</pre></td>
<td><pre>{{ s.turn }}</pre></td>{% if any_human %}<td><pre>{{ s.human }}</pre></td>{% endif %}
<td>{{ s.by }}{% if s.self %} <span class="self">self</span>{% endif %}</td>
<td>{{ s.rationale }}</td></tr>{% endfor %}</table>
{% endfor %}
{% if failures %}<h2>Judge failures (raw judge output kept)</h2>
<table><tr><th>record</th><th>judge</th><th>error</th><th>raw</th></tr>
{% for f in failures %}<tr><td>{{ f.key }}</td><td>{{ f.judge }}</td><td>{{ f.error }}</td>
<td><pre>{{ f.raw }}</pre></td></tr>
{% endfor %}</table>{% endif %}
</body></html>
"""


def _clip(text: str | None, limit: int = CLIP) -> str:
    text = text or ""
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more chars]"


class _Smallest:
    """The `size` smallest (key, raw line) pairs offered (deterministic examples in bounded memory)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: list[tuple[str, int, bytes]] = []

    def offer(self, key: str, number: int, raw: bytes) -> None:
        if len(self.items) < self.size or key < self.items[-1][0]:
            bisect.insort(self.items, (key, number, raw))
            del self.items[self.size:]

    def records(self, path: Path) -> list[ProbeRecord]:
        out = []
        for _, number, raw in self.items:
            try:
                out.append(ProbeRecord.model_validate_json(raw))
            except ValidationError as exc:
                raise UserError(f"{path}:{number}: not a userturn record ({first_error(exc, 'record')})") from None
        return out


@dataclass
class Examples:
    """Sample records per label (smallest keys first) and records whose judges failed, for the HTML report."""

    by_label: dict[str, list[ProbeRecord]]
    failures: list[ProbeRecord]


def select_examples(path: str | Path, keep: np.ndarray, failures: int = 20) -> Examples:
    """Second streaming pass: up to SAMPLES_PER_LABEL records per label and `failures` judge-failed records, by
    smallest key, among the lines that count (`keep`, from the first pass)."""
    per_label = {label: _Smallest(SAMPLES_PER_LABEL) for label in LABELS}
    failed = _Smallest(failures)
    path = Path(path)
    for index, (number, d, raw) in enumerate(iter_checked(path)):
        if not keep[index]:
            continue
        if d.get("label") is not None:
            per_label[d["label"]].offer(d["key"], number, raw)
        if d.get("judge_status") == "error":
            failed.offer(d["key"], number, raw)
    return Examples(by_label={label: s.records(path) for label, s in per_label.items() if s.items},
                    failures=failed.records(path))


def examples_of(records: list[ProbeRecord]) -> Examples:
    """`select_examples` for records already loaded."""
    ordered = sorted(records, key=lambda r: r.key)
    by_label = {label: [r for r in ordered if r.label == label][:SAMPLES_PER_LABEL] for label in LABELS}
    return Examples(by_label={k: v for k, v in by_label.items() if v},
                    failures=[r for r in ordered if r.judge_status == "error"][:20])


def _samples(examples: Examples) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for label, rows in examples.by_label.items():
        out[label] = []
        for r in rows:
            query, response = query_and_response(r)
            voters = [v for v in r.judges if v.label == r.label and v.status == "ok"]
            by = ", ".join(v.judge for v in voters) or (r.label_source or "")
            out[label].append({"key": r.key, "query": _clip(query), "response": _clip(response),
                               "turn": _clip(r.user_turn), "human": _clip(human_turn(r)), "by": by,
                               "self": is_self_judged(r),
                               "rationale": _clip(voters[0].rationale if voters else "", 300)})
    return out


def _failures(records: list[ProbeRecord], limit: int = 20) -> list[dict]:
    rows = []
    for r in records:
        for v in r.judges:
            if v.status == "error":
                rows.append({"key": r.key, "judge": v.judge, "error": v.error, "raw": _clip(v.raw, 400)})
        if len(rows) >= limit:
            break
    return rows


def render_html(groups: list[GroupSummary], agreements: list[PanelAgreement], examples: Examples, total: int,
                figures: dict[str, bytes] | None, source: str, no_figures: str = "") -> str:
    """The report as one HTML string (autoescaped: generated text cannot inject markup)."""
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return env.from_string(TEMPLATE).render(
        source=source, total=total, generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        groups=groups, labels=LABELS, short=SHORT, descriptions=DESCRIPTIONS,
        any_self=any(g.self_judged for g in groups), agreements=agreements,
        any_settings=any(g.settings for g in groups),
        figures={k: base64.b64encode(v).decode("ascii") for k, v in (figures or {}).items()},
        no_figures=no_figures, samples=_samples(examples), failures=_failures(examples.failures),
        any_human=any(human_turn(r) for rows in examples.by_label.values() for r in rows),
        rate=fmt_rate, ci=fmt_ci, delta=fmt_delta, temp=fmt_temp, kappa=lambda k: "—" if k is None else f"{k:.3f}",
    )


def write_html(html: str, path: str | Path) -> Path:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}") from None
    return path
