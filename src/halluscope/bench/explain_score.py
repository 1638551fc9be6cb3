"""Scoring explanations against the explanation set's gold (docs/benchmarks.md, "Explanations").

Reports are read as plain JSON, never through today's record types, so reports written by any version of
halluscope can be scored. A line of the reports file is matched to an item by its ``id`` and is either

* a result row of ``halluscope check --input TARGETS --output REPORTS.jsonl`` (``score``, ``findings`` with
  ``spans`` and ``evidence`` offsets, ``calls``, ``prompt_tokens``, ``completion_tokens``, ``elapsed_s``), or
* ``{"id": ..., "report": REPORT}`` with a whole Report as ``--format json`` prints it (``findings`` with
  ``target_spans``, ``evidence`` with ``span``, ``usage``, ``elapsed_s``).

**Per item** (the finding that *hits* is the one whose target spans overlap the injected span most):

- *span hit*: a finding overlaps the injected span;
- *span precision*: of the hitting finding's characters (its spans merged), the share inside the injected span
  (items without a hit are left out of this mean, which is read beside the hit rate);
- *evidence hit@1*: the hitting finding's first evidence passage has source offsets that overlap the gold source
  sentence (items without a gold sentence, the invented ones, are left out);
- *relation*: the hitting finding's ``evidence_relation`` equals the gold (``contradicts`` / ``not_mentioned``);
- *fixes*: every finding's shown ``fix`` (non-empty) counts as shown; it is verified when ``fix_verified`` is true.
  The hitting finding's fix *restores the gold fact* when, compared word by word (lower case, ``n't`` read as
  ``not``, thousands separators dropped): for a swap, it holds the original text and, unless the injected text
  lies within the original (``did not`` -> ``did``), no longer holds the injected text; for an invented sentence,
  it holds fewer than half of that sentence's content words;
- *markup leaks*: a finding's description, fix or evidence text in which
  :func:`halluscope.text.markup.markup_found` finds a fence tag, the data notice, reply-format instructions, a
  section header or a format placeholder;
- calls, prompt and completion tokens and seconds as the report gives them.

The JSON also gives relation accuracy and evidence hit@1 over the items with a span hit alone (``_given_hit``), to
tell a wrong explanation from a missed finding.

**Unscored and missing reports** (the bench's rule, :data:`halluscope.bench.worst_case.HEADLINE_RULE`): an item
whose report is missing or unscored counts as a miss for every per-item rate; each rate is also given over the
scored items alone, beside the coverage. **Fields an older report lacks** (no ``evidence_relation``, no
``fix_verified``, evidence without offsets) count as misses and are counted under ``not_reported``; nothing crashes
on them. Every rate carries a percentile bootstrap CI over items (:func:`halluscope.bench.metrics.bootstrap_ci`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.bench.metrics import bootstrap_ci, coverage
from halluscope.bench.worst_case import HEADLINE_RULE
from halluscope.text.lexical import content_tokens, tokens
from halluscope.text.markup import markup_found

RELATIONS = ("contradicts", "not_mentioned")


@dataclass
class FindingView:
    """What the scorer reads of one finding, from either report form."""

    spans: list[tuple[int, int]]
    texts: list[tuple[str, str]]  # (field, text) of what a reader sees: description, fix, evidence
    evidence: list[tuple[int, int] | None]  # source offsets of each evidence passage (None: not given)
    relation: str | None
    relation_reported: bool
    fix: str | None
    fix_verified: bool | None  # None: the report does not say


@dataclass
class ReportView:
    scored: bool
    findings: list[FindingView] = field(default_factory=list)
    calls: float | None = None
    prompt_tokens: float | None = None
    completion_tokens: float | None = None
    seconds: float | None = None
    method: str | None = None
    model: str | None = None


def _offsets(value: Any) -> tuple[int, int] | None:
    if isinstance(value, dict) and isinstance(value.get("start"), int) and isinstance(value.get("end"), int):
        return value["start"], value["end"]
    return None


def _evidence_offsets(item: dict[str, Any]) -> tuple[int, int] | None:
    return _offsets(item.get("span")) or _offsets(item)


def _finding(raw: dict[str, Any]) -> FindingView:
    spans_raw = raw.get("target_spans", raw.get("spans")) or []
    spans = [s for s in (_offsets(x) for x in spans_raw if isinstance(x, dict)) if s is not None]
    evidence_raw = [e for e in raw.get("evidence") or [] if isinstance(e, dict)]
    texts = [("description", str(raw.get("description") or ""))]
    fix = raw.get("fix") if isinstance(raw.get("fix"), str) and raw.get("fix", "").strip() else None
    if fix is not None:
        texts.append(("fix", fix))
    texts += [("evidence", str(e.get("text") or "")) for e in evidence_raw]
    verified = raw.get("fix_verified")
    return FindingView(
        spans=spans,
        texts=texts,
        evidence=[_evidence_offsets(e) for e in evidence_raw],
        relation=raw.get("evidence_relation") if isinstance(raw.get("evidence_relation"), str) else None,
        relation_reported="evidence_relation" in raw,
        fix=fix,
        fix_verified=verified if isinstance(verified, bool) else None,
    )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def report_view(row: dict[str, Any]) -> ReportView:
    """A reports-file line (module docstring) as the scorer reads it."""
    inner = row.get("report")
    report: dict[str, Any] = inner if isinstance(inner, dict) else row
    given = report.get("usage")
    usage: dict[str, Any] = given if isinstance(given, dict) else report
    raw = report.get("findings") or []
    if isinstance(raw, str):  # a result row converted from CSV or parquet holds its findings as JSON text
        try:
            raw = json.loads(raw)
        except ValueError:
            raw = []
    findings = [_finding(f) for f in raw if isinstance(f, dict)] if isinstance(raw, list) else []
    return ReportView(
        scored=_number(report.get("score")) is not None,
        findings=findings,
        calls=_number(usage.get("calls")),
        prompt_tokens=_number(usage.get("prompt_tokens")),
        completion_tokens=_number(usage.get("completion_tokens")),
        seconds=_number(report.get("elapsed_s")),
        method=report.get("method") if isinstance(report.get("method"), str) else None,
        model=report.get("model") if isinstance(report.get("model"), str) else None,
    )


def read_reports(path: Path) -> dict[str, dict[str, Any]]:
    """The lines of a reports file by id (a later line with the same id replaces an earlier one)."""
    rows: dict[str, dict[str, Any]] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            raise ValueError(f"{path}:{n}: a reports line is a JSON object with an 'id'")
        rows[row["id"]] = row
    return rows


# --- restoring the gold fact ---------------------------------------------------------------------------------

_CONTRACTIONS = ((r"\bcan't\b", "can not"), (r"\bwon't\b", "will not"), (r"\bcannot\b", "can not"), (r"n't\b", " not"))


def words(text: str) -> list[str]:
    """``text`` as the restore rule compares it: lower case, ``n't`` as ``not``, ``1,013`` as ``1013``."""
    text = text.lower().replace("’", "'")
    for pattern, replacement in _CONTRACTIONS:
        text = re.sub(pattern, replacement, text)
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    return re.findall(r"\d+(?:\.\d+)?|[^\W\d_]+", text)


def _holds(haystack: list[str], needle: list[str]) -> bool:
    n = len(needle)
    return n > 0 and any(haystack[i : i + n] == needle for i in range(len(haystack) - n + 1))


def restores(fix: str, item: dict[str, Any]) -> bool:
    """Whether ``fix`` restores the item's gold fact (module docstring)."""
    have = words(fix)
    if item["relation"] == "not_mentioned":
        injected = {t.norm for t in content_tokens(tokens(item["injected"]))}
        kept = {t.norm for t in content_tokens(tokens(fix))} & injected
        return len(kept) * 2 < len(injected) if injected else True
    original, injected_words = words(item["original"]), words(item["injected"])
    if not _holds(have, original):
        return False
    return _holds(original, injected_words) or not _holds(have, injected_words)


# --- per item ------------------------------------------------------------------------------------------------

_ANGLE = re.compile(r"<[^<>\n]{1,60}>")


def leaked_markup(text: str, field: str, item: dict[str, Any]) -> str | None:
    """The prompt markup ``text`` holds (:func:`~halluscope.text.markup.markup_found`), or None. The caller's own
    text is not a leak: an evidence passage found verbatim in the source is never one, and in any text the
    angle-bracket tokens and the lines that occur in the item's source or target are left out first (a dialogue's
    ``<file_gif>``)."""
    if field == "evidence" and text.strip() and text in item["source"]:
        return None
    own = item["source"] + "\n" + item["target"]
    kept = _ANGLE.sub(lambda m: "" if m.group() in own else m.group(), text)
    kept = "\n".join(line for line in kept.splitlines() if not (line.strip() and line.strip() in own))
    return markup_found(kept)


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> int:
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def _merged_length(spans: Sequence[tuple[int, int]]) -> int:
    total, end = 0, -1
    for start, stop in sorted(spans):
        start = max(start, end)
        if stop > start:
            total += stop - start
            end = stop
    return total


def score_item(item: dict[str, Any], row: dict[str, Any] | None) -> dict[str, Any]:
    """One item's outcome (module docstring); ``row`` None: no report for it."""
    gold = (item["span"]["start"], item["span"]["end"])
    out: dict[str, Any] = {"id": item["id"], "generator": item["generator"], "relation_gold": item["relation"]}
    if row is None:
        return {**out, "status": "missing"}
    view = report_view(row)
    out.update(
        status="scored" if view.scored else "unscored",
        calls=view.calls,
        prompt_tokens=view.prompt_tokens,
        completion_tokens=view.completion_tokens,
        seconds=view.seconds,
        findings=len(view.findings),
        fixes_shown=sum(f.fix is not None for f in view.findings),
        fixes_verified=sum(f.fix is not None and f.fix_verified is True for f in view.findings),
        fix_verified_not_reported=sum(f.fix is not None and f.fix_verified is None for f in view.findings),
        markup=[
            {"field": name, "found": found}
            for f in view.findings
            for name, text in f.texts
            if (found := leaked_markup(text, name, item)) is not None
        ],
    )
    hits = [(sum(_overlap(s, gold) for s in f.spans), f) for f in view.findings]
    hits = [(o, f) for o, f in hits if o > 0]
    if not view.scored or not hits:
        return {**out, "span_hit": False}
    overlap, hit = max(hits, key=lambda h: h[0])
    out.update(span_hit=True, span_precision=min(1.0, overlap / max(1, _merged_length(hit.spans))))
    if item.get("source_span"):
        top = hit.evidence[0] if hit.evidence else None
        sentence = (item["source_span"]["start"], item["source_span"]["end"])
        out["evidence_hit"] = top is not None and _overlap(top, sentence) > 0
        out["evidence_not_reported"] = bool(hit.evidence) and top is None
    out["relation"] = hit.relation
    out["relation_not_reported"] = not hit.relation_reported or hit.relation is None
    if hit.fix is not None:
        out["fix"] = hit.fix
        out["fix_restores"] = restores(hit.fix, item)
    return out


# --- the summary ---------------------------------------------------------------------------------------------


def _rate(
    outcomes: Sequence[dict[str, Any]],
    value: Callable[[dict[str, Any]], float | None],
    n_bootstrap: int,
    seed: int,
) -> dict[str, Any]:
    """A mean over the items ``value`` gives a number for, with its CI, and the same over scored items alone."""
    values = [value(o) for o in outcomes]
    kept = np.array([v for v in values if v is not None], dtype=float)
    scored = [v for o, v in zip(outcomes, values) if v is not None and o["status"] == "scored"]

    def mean(idx: np.ndarray) -> float | None:
        return float(kept[idx].mean()) if len(idx) else None

    ci = bootstrap_ci(mean, len(kept), n_resamples=n_bootstrap, seed=seed)
    ci["scored_only"] = sum(scored) / len(scored) if scored else None
    return ci


def _share(outcomes: Sequence[dict[str, Any]], part: str, whole: str, n_bootstrap: int, seed: int) -> dict[str, Any]:
    """``sum(part) / sum(whole)`` over the items, with a bootstrap CI over items."""
    parts = np.array([o.get(part, 0) for o in outcomes], dtype=float)
    wholes = np.array([o.get(whole, 0) for o in outcomes], dtype=float)

    def share(idx: np.ndarray) -> float | None:
        total = wholes[idx].sum()
        return float(parts[idx].sum() / total) if total else None

    ci = bootstrap_ci(share, len(outcomes), n_resamples=n_bootstrap, seed=seed)
    ci["count"] = int(wholes.sum())
    return ci


def _field(key: str, outcome: dict[str, Any]) -> float | None:
    value = outcome.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def summarize(
    items: Sequence[dict[str, Any]], outcomes: Sequence[dict[str, Any]], n_bootstrap: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """The metrics of one run over the items (module docstring)."""

    def flag(key: str) -> Callable[[dict[str, Any]], float | None]:
        return lambda o: 1.0 if o.get(key) else 0.0

    def among(key: str, when: Callable[[dict[str, Any]], bool]) -> Callable[[dict[str, Any]], float | None]:
        return lambda o: (1.0 if o.get(key) else 0.0) if when(o) else None

    gold_sentence = {i["id"]: bool(i.get("source_span")) for i in items}
    by_id = {i["id"]: i for i in items}
    scored = sum(o["status"] == "scored" for o in outcomes)
    with_fix = [o for o in outcomes if "fix_restores" in o]
    per_item = [o for o in outcomes if o["status"] != "missing"]
    metrics = {
        "span_hit": _rate(outcomes, flag("span_hit"), n_bootstrap, seed),
        "span_precision": _rate(outcomes, lambda o: o.get("span_precision"), n_bootstrap, seed),
        "evidence_hit_at_1": _rate(
            outcomes, among("evidence_hit", lambda o: gold_sentence[o["id"]]), n_bootstrap, seed
        ),
        "relation_accuracy": _rate(
            outcomes, lambda o: 1.0 if o.get("relation") == by_id[o["id"]]["relation"] else 0.0, n_bootstrap, seed
        ),
        "relation_accuracy_given_hit": _rate(
            outcomes,
            lambda o: (1.0 if o.get("relation") == by_id[o["id"]]["relation"] else 0.0) if o.get("span_hit") else None,
            n_bootstrap,
            seed,
        ),
        "evidence_hit_at_1_given_hit": _rate(
            outcomes,
            among("evidence_hit", lambda o: gold_sentence[o["id"]] and bool(o.get("span_hit"))),
            n_bootstrap,
            seed,
        ),
        "fixes_verified": _share(outcomes, "fixes_verified", "fixes_shown", n_bootstrap, seed),
        "fixes_restoring_gold": _rate(with_fix, flag("fix_restores"), n_bootstrap, seed),
        "markup_leaks": sum(len(o.get("markup", [])) for o in outcomes),
        "items_with_markup_leak": sum(bool(o.get("markup")) for o in outcomes),
    }
    for key in ("calls", "prompt_tokens", "completion_tokens", "seconds"):
        metrics[f"{key}_per_item"] = _rate(per_item, functools.partial(_field, key), n_bootstrap, seed)
    relations = {r: sum(1 for i in items if i["relation"] == r) for r in RELATIONS}
    generators: dict[str, dict[str, Any]] = {}
    for o in outcomes:
        g = generators.setdefault(o["generator"], {"items": 0, "span_hits": 0, "relation_right": 0})
        g["items"] += 1
        g["span_hits"] += bool(o.get("span_hit"))
        g["relation_right"] += o.get("relation") == by_id[o["id"]]["relation"]
    return {
        "items": len(items),
        "relations": relations,
        "coverage": coverage(scored, len(items)),
        "missing": sum(o["status"] == "missing" for o in outcomes),
        "unscored": sum(o["status"] == "unscored" for o in outcomes),
        "rule": HEADLINE_RULE,
        "metrics": metrics,
        "not_reported": {
            "evidence_relation": sum(bool(o.get("relation_not_reported")) for o in outcomes),
            "fix_verified": sum(o.get("fix_verified_not_reported", 0) for o in outcomes),
            "evidence_offsets": sum(bool(o.get("evidence_not_reported")) for o in outcomes),
            "usage": sum(o.get("calls") is None for o in per_item),
        },
        "by_generator": generators,
        "markup_examples": [{"id": o["id"], **m} for o in outcomes for m in o.get("markup", [])][:20],
    }


def score_reports(
    items: Sequence[dict[str, Any]], rows: dict[str, dict[str, Any]], n_bootstrap: int = 1000, seed: int = 0
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The summary and the per-item outcomes of one reports file against the set's items."""
    outcomes = [score_item(item, rows.get(item["id"])) for item in items]
    summary = summarize(items, outcomes, n_bootstrap, seed)
    views = [report_view(r) for r in rows.values()]
    summary["method"] = next((v.method for v in views if v.method), None)
    summary["model"] = next((v.model for v in views if v.model), None)
    return summary, outcomes


# --- the table -----------------------------------------------------------------------------------------------


def _cell(metric: dict[str, Any] | None, digits: int = 3) -> str:
    if not metric or metric.get("value") is None:
        return "-"
    text = f"{metric['value']:.{digits}f}"
    if metric.get("low") is not None:
        text += f" [{metric['low']:.{digits}f}, {metric['high']:.{digits}f}]"
    return text


TABLE_HEADER = (
    "| run | items (scored) | span hit | span precision | evidence hit@1 | relation accuracy | shown fixes verified "
    "| fixes restoring the gold fact | markup leaks | calls / item | tokens / item (prompt + completion) "
    "| s / item | not reported (relation / fix_verified / evidence offsets) |"
)


def markdown_table(runs: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """One row per run (label, summary), the 95 % bootstrap CIs in brackets."""
    lines = [TABLE_HEADER, "|" + "---|" * TABLE_HEADER.count(" | ") + "---|"]
    for label, s in runs:
        m = s["metrics"]
        tokens_ = "-"
        if m["prompt_tokens_per_item"].get("value") is not None:
            tokens_ = (
                f"{m['prompt_tokens_per_item']['value']:.0f} + {m['completion_tokens_per_item'].get('value') or 0:.0f}"
            )
        fixes = f"{_cell(m['fixes_verified'])} (of {m['fixes_verified']['count']})"
        restoring = f"{_cell(m['fixes_restoring_gold'])} (of {m['fixes_restoring_gold']['n']})"
        nr = s["not_reported"]
        lines.append(
            f"| {label} | {s['items']} ({s['coverage']['scored']}) | {_cell(m['span_hit'])} | "
            f"{_cell(m['span_precision'])} | {_cell(m['evidence_hit_at_1'])} | {_cell(m['relation_accuracy'])} | "
            f"{fixes} | {restoring} | {m['markup_leaks']} | {_cell(m['calls_per_item'], 1)} | {tokens_} | "
            f"{_cell(m['seconds_per_item'], 1)} | {nr['evidence_relation']} / {nr['fix_verified']} / "
            f"{nr['evidence_offsets']} |"
        )
    return "\n".join(lines) + "\n"
