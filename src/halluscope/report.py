"""The web report: one self-contained HTML page for a Report.

Source and target side by side; hallucinated target spans highlighted (hover shows the description,
click jumps to and flashes the evidence in the source); the score, threshold and label, the cost in words;
findings list; and, for methods that reason about event order, the events in target order with the inverted pairs.
The method's own numbers (sub-scores) only with ``details=True``.

The page is linear in the report and bounded: it lists and highlights at most :class:`RenderLimits` findings,
claims and unscored claims (a note says how many were left out; the report data embedded in the page, like
the JSON report, keeps everything), each text cut at ``RenderLimits.text_chars``, at most
``RenderLimits.marks_per_piece`` findings named on one highlighted piece, and at most
``RenderLimits.markup_bytes`` of highlight markup per text. A ``deadline`` (``time.monotonic()``) ends a render
that runs past it with :class:`RenderTimeout`.
"""

from __future__ import annotations

import heapq
import html
import json
import time
from dataclasses import dataclass
from pathlib import Path

from halluscope.records import Evidence, Finding, Report, Span, Verdict


@dataclass(frozen=True)
class RenderLimits:
    """The most one HTML page shows; what is left out is counted in a note on the page."""

    findings: int = 1000
    """Findings listed and highlighted (the first ones, in report order)."""
    claims: int = 2000
    """Rows of the claims table and of the events table."""
    unscored: int = 1000
    """Unscored claims listed and marked in the target."""
    text_chars: int = 1000
    """Each description, claim, reason and quoted span is cut here."""
    marks_per_piece: int = 8
    """Findings named on one highlighted piece of text; spans and evidence highlighted and listed per finding."""
    title_chars: int = 300
    """The hover title of one highlighted piece is cut here."""
    markup_bytes: int = 4 * 2**20
    """Markup the highlights of one text may add to it (4 MiB); past it the rest of the text is shown unmarked,
    with a note. So a page is at most its escaped texts, 2 x this, the capped lists and the embedded report."""


DEFAULT_LIMITS = RenderLimits()


class RenderTimeout(RuntimeError):
    """The render ran past its deadline and stopped (the caller answers with an error, nothing keeps rendering)."""


def _now() -> float:
    return time.monotonic()


def _in_time(deadline: float | None) -> None:
    if deadline is not None and _now() > deadline:
        raise RenderTimeout("the HTML report ran past its time limit and was stopped")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


_KIND_CLASS = {"unsupported": "unsup", "contradicted": "contra", "event_order": "order"}

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{padding:14px 22px;background:#fff;border-bottom:1px solid #ddd}
header h1{font-size:18px;margin:0 0 6px} .score{font-size:28px;font-weight:700}
.bad{color:#b3261e}.good{color:#1b6e3a}.muted{color:#777;font-size:13px}
main{display:grid;grid-template-columns:1fr 1fr;gap:16px;padding:16px 22px}
section{background:#fff;border:1px solid #ddd;border-radius:8px;padding:12px 16px;overflow:auto}
section.full{grid-column:1 / span 2}
.text{white-space:pre-wrap;line-height:1.55;max-height:70vh;overflow:auto}
mark{border-radius:3px;padding:0 1px;cursor:pointer}
mark.unsup{background:#ffd6d1}mark.contra{background:#ffb4a8}mark.order{background:#ffe9a8}
mark.other{background:#e3d7ff}mark.ev{background:#d5ecff;cursor:default}
mark.unscored{background:none;border-bottom:2px dotted #888;border-radius:0}
mark.flash{outline:3px solid #1a73e8;transition:outline .2s}
table{border-collapse:collapse;font-size:14px}
td,th{border-bottom:1px solid #eee;padding:4px 10px;text-align:left;vertical-align:top}
mark[data-n]::after{content:attr(data-n);font-size:10px;vertical-align:super;margin-left:1px;color:#b3261e}
.ok{color:#1b6e3a}
ol.findings li{margin-bottom:8px}
.kind{font-size:12px;padding:1px 6px;border-radius:8px;background:#eee;margin-right:6px}
"""

_JS = """
document.querySelectorAll('mark[data-f]').forEach(function(m){
  m.addEventListener('click', function(){
    var ids = m.dataset.f.split(' ');
    for (var i = 0; i < ids.length; i++) {
      var ev = document.querySelector('mark.ev[data-f~="' + ids[i] + '"]');
      if (ev) { ev.scrollIntoView({behavior:'smooth', block:'center'}); ev.classList.add('flash');
                setTimeout(function(){ ev.classList.remove('flash'); }, 1500); return; }
    }
    var item = document.getElementById(ids[0].charAt(0) === 'u' ? 'unscored-' + ids[0].slice(1) : 'finding-' + ids[0]);
    if (item) item.scrollIntoView({behavior:'smooth', block:'center'});
  });
});
"""


_UNMARKED_NOTE = (
    "<span class='muted left-out'>[highlights end here: the page holds at most RenderLimits.markup_bytes of them; "
    "the findings list and the report data go on]</span>"
)


def _smallest_active(heap: list[int], active: set[int], k: int) -> list[int]:
    """The ``k`` smallest mark indexes in ``active``, ascending; drops ended marks from ``heap`` for good."""
    taken: list[int] = []
    while heap and len(taken) < k:
        index = heapq.heappop(heap)
        if index in active:
            taken.append(index)
    for index in taken:
        heapq.heappush(heap, index)
    return taken


def _highlight(
    text: str,
    marks: list[tuple[Span, int | str, str, str]],
    limits: RenderLimits = DEFAULT_LIMITS,
    deadline: float | None = None,
) -> str:
    """HTML of ``text`` with possibly overlapping spans marked. ``marks``: (span, finding id, css class, title).

    One sweep over the span boundaries (O((pieces + marks) log marks)): each piece names the first
    ``limits.marks_per_piece`` marks covering it, in ``marks`` order, and says how many more cover it."""
    n = len(text)
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    cuts = {0, n}
    for k, (span, *_) in enumerate(marks):
        a, b = max(0, min(span.start, n)), max(0, min(span.end, n))
        cuts.update((a, b))
        if a < b:
            starts.setdefault(a, []).append(k)
            ends.setdefault(b, []).append(k)
    bounds = sorted(cuts)
    active: set[int] = set()
    heap: list[int] = []
    out: list[str] = []
    markup = 0
    for a, b in zip(bounds, bounds[1:]):
        _in_time(deadline)
        active.difference_update(ends.get(a, ()))
        for k in starts.get(a, ()):
            active.add(k)
            heapq.heappush(heap, k)
        piece = html.escape(text[a:b])
        if markup > limits.markup_bytes:  # past the budget: the rest unmarked, once
            out.append(_UNMARKED_NOTE + html.escape(text[a:]))
            break
        if not active:
            out.append(piece)
            continue
        covering = [marks[k] for k in _smallest_active(heap, active, limits.marks_per_piece)]
        ids = " ".join(str(fid) for _, fid, _, _ in covering)
        more = len(active) - len(covering)
        title = " | ".join(dict.fromkeys(t for _, _, _, t in covering)) + (f" | and {more} more" if more else "")
        title = html.escape(_cut(title, limits.title_chars), quote=True)
        numbers = [
            str(fid + 1)
            for span, fid, cls, _ in (marks[k] for k in ends.get(b, ()) if k in active)
            if isinstance(fid, int) and fid >= 0 and cls != "ev" and span.end == b  # finding numbers where they end
        ]
        number = f' data-n="{" ".join(dict.fromkeys(numbers))}"' if numbers else ""
        tag = f'<mark class="{covering[0][2]}" data-f="{ids}"{number} title="{title}">'
        markup += len(tag) + 7
        out.append(f"{tag}{piece}</mark>")
    return "".join(out)


def _script_json(data: str) -> str:
    """JSON made safe inside ``<script type="application/json">`` and still valid JSON once read back.

    Only two sequences can end or derail a script element: ``</`` (closes it) and ``<!--`` (script-data
    escape state). Both can occur only inside JSON strings, where ``<\\/`` and ``\\u003c`` are valid escapes,
    so ``json.loads(element.textContent)`` returns exactly the report. HTML-escaping would change the data."""
    return data.replace("<!--", "\\u003c!--").replace("</", "<\\/")


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _chunk_note(ev: Evidence) -> str:
    """`` in chunk N`` for evidence from a source given as a list of chunks, else ``""``."""
    return "" if ev.chunk is None else f" in chunk {ev.chunk}"


def _evidence_line(ev: Evidence) -> str:
    return f"<div class='muted'>{html.escape(ev.relation)}{_chunk_note(ev)}: “{html.escape(ev.text[:200])}”</div>"


def _left_out(shown: int, total: int, what: str) -> str:
    """The note under a list cut at its limit (empty when nothing was left out)."""
    if total <= shown:
        return ""
    return (
        f"<p class='muted left-out'>Showing the first {shown:,} of {total:,} {what}: {total - shown:,} left out of "
        "this page to keep it small; the report data in this page and the JSON report hold them all.</p>"
    )


def _finding_item(i: int, f: Finding, target: str, limits: RenderLimits) -> str:
    spans = f.target_spans[: limits.marks_per_piece]
    where = "; ".join(html.escape(_cut(s.of(target), limits.title_chars)) for s in spans)
    if len(f.target_spans) > len(spans):
        where += f"; and {len(f.target_spans) - len(spans)} more"
    evid = "".join(
        f"<div class='muted'>evidence{_chunk_note(e)} ({html.escape(e.relation)}): “{html.escape(e.text[:300])}”</div>"
        for e in f.evidence[: limits.marks_per_piece]
    )
    return (
        f"<li id='finding-{i}'><span class='kind'>{html.escape(f.kind)}</span>"
        f"{html.escape(_cut(f.description, limits.text_chars))}"
        f"<div class='muted'>target: {where or '<i>not located in the text</i>'}</div>{evid}"
        + (f"<div class='muted'>fix: {html.escape(_cut(f.fix, limits.text_chars))}</div>" if f.fix else "")
        + "</li>"
    )


def _claim_row(n: int, v: Verdict, limits: RenderLimits) -> str:
    cls = "ok" if v.label == "supported" else "bad" if v.label != "unscored" else "muted"
    evidence = "".join(_evidence_line(e) for e in v.evidence[: limits.marks_per_piece]) or "–"
    return (
        f"<tr><td>{n}</td><td>{html.escape(_cut(v.claim.text, limits.text_chars))}</td>"
        f"<td class='{cls}'>{html.escape(v.label)}</td><td>{evidence}</td></tr>"
    )


def render_html(  # noqa: C901 - one HTML page written top to bottom, a branch per optional section
    report: Report,
    source: str,
    target: str,
    title: str = "halluscope report",
    *,
    limits: RenderLimits = DEFAULT_LIMITS,
    deadline: float | None = None,
    details: bool = False,
) -> str:
    """The page: linear in the report, at most ``limits`` findings, claims and unscored claims shown (the
    embedded report data keeps everything); past ``deadline`` (``time.monotonic()``) :class:`RenderTimeout`."""
    findings = report.findings[: limits.findings]
    verdicts = report.verdicts[: limits.claims]
    all_unscored = [v for v in report.verdicts if v.label == "unscored"]
    unscored_verdicts = all_unscored[: limits.unscored]
    target_marks: list[tuple[Span, int | str, str, str]] = []
    source_marks: list[tuple[Span, int | str, str, str]] = []
    for i, f in enumerate(findings):
        _in_time(deadline)
        cls = _KIND_CLASS.get(f.kind, "other")
        for span in f.target_spans[: limits.marks_per_piece]:
            target_marks.append((span, i, cls, f.description))
        for ev in f.evidence[: limits.marks_per_piece]:
            if ev.span is not None:
                source_marks.append((ev.span, i, "ev", f"evidence ({ev.relation}) for finding {i + 1}"))
    for j, v in enumerate(unscored_verdicts):  # not a finding: the claim could not be judged, and the page says why
        for span in v.claim.target_spans[: limits.marks_per_piece]:
            target_marks.append((span, f"u{j}", "unscored", f"unscored: {v.reason or 'no reason recorded'}"))
    for v in verdicts:  # supporting evidence of verdicts also shows in the source
        for ev in v.evidence[: limits.marks_per_piece]:
            if ev.span is not None and ev.relation == "supports":
                source_marks.append((ev.span, -1, "ev", f"supports: {v.claim.text[:80]}"))

    score_cls = "good" if report.label == "consistent" else "bad"  # the label, which never contradicts the findings
    score = "unscored" if report.score is None else f"{report.score:.3f}"
    sub_rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{_fmt(v)}</td></tr>" for k, v in report.subscores.items())
    finding_items = []
    for i, f in enumerate(findings):
        _in_time(deadline)
        finding_items.append(_finding_item(i, f, target, limits))
    events = [c for c in report.claims if c.kind == "event"]
    order_section = ""
    if events:
        rows = "".join(
            f"<tr><td>{c.order if c.order is not None else ''}</td>"
            f"<td>{html.escape(_cut(c.text, limits.text_chars))}</td></tr>"
            for c in events[: limits.claims]
        )
        inversions = [f for f in report.findings if f.kind == "event_order"]
        inv = (
            "".join(
                f"<li>{html.escape(_cut(f.description, limits.text_chars))}</li>" for f in inversions[: limits.findings]
            )
            or "<li>none</li>"
        )
        order_section = (
            "<section class='full'><h3>Events in target order</h3>"
            f"<table><tr><th>#</th><th>event</th></tr>{rows}</table>{_left_out(limits.claims, len(events), 'events')}"
            f"<h4>Order violations</h4><ul>{inv}</ul>{_left_out(limits.findings, len(inversions), 'order violations')}"
            "</section>"
        )
    claims_section = ""
    if report.verdicts:
        claim_rows = []
        for n, v in enumerate(verdicts, 1):
            _in_time(deadline)
            claim_rows.append(_claim_row(n, v, limits))
        claims_section = (
            f"<section class='full'><h3>Claims ({len(report.verdicts)}), passing ones too</h3>"
            "<table><tr><th>#</th><th>claim</th><th>verdict</th><th>evidence</th></tr>"
            f"{''.join(claim_rows)}</table>{_left_out(len(verdicts), len(report.verdicts), 'claims')}</section>"
        )
    unscored = len(all_unscored)
    unscored_section = ""
    if unscored_verdicts:
        items = "".join(
            f"<li id='unscored-{j}'>{html.escape(_cut(v.claim.text, limits.text_chars))}"
            f"<div class='muted'>not judged: {html.escape(_cut(v.reason or 'no reason recorded', limits.text_chars))}"
            "</div></li>"
            for j, v in enumerate(unscored_verdicts)
        )
        unscored_section = (
            f"<section class='full'><h3>Unscored claims ({unscored})</h3><p class='muted'>Neither "
            "supported nor flagged: no valid verdict was given for these claims (dotted underline "
            f"in the target).</p><ol class='findings'>{items}</ol>"
            f"{_left_out(len(unscored_verdicts), unscored, 'unscored claims')}</section>"
        )
    u = report.usage
    meta = (
        f"{html.escape(report.method)} · {html.escape(report.model or 'no LLM')} · {u.calls} LLM calls · "
        f"{u.prompt_tokens + u.completion_tokens} tokens{u.cached_note()} · {u.cache_hits} replies from cache · "
        f"{report.elapsed_s:.2f}s" + (f" · {unscored} unscored claims" if unscored else "")
    )
    if u.cost_usd is not None:
        meta += f" · ${u.cost_usd:.6f}"
    elif u.calls:
        meta += " · cost unknown" + (f" ({html.escape(u.cost_note)})" if u.cost_note else "")
    threshold = "" if report.threshold is None else f" · threshold {report.threshold:.3f}"
    reason = (
        f"<div class='bad'>could not score: {html.escape(report.unscored_reason)}</div>"
        if report.unscored_reason
        else ""
    )
    findings_html = (
        f"<ol class='findings'>{''.join(finding_items)}</ol>" if finding_items else "<p class='muted'>none</p>"
    ) + _left_out(len(findings), len(report.findings), "findings")
    source_html = _highlight(source, source_marks, limits, deadline)
    target_html = _highlight(target, target_marks, limits, deadline)
    data = _script_json(report.model_dump_json())
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{_CSS}</style></head><body>
<header><h1>{html.escape(title)}</h1><span class="score {score_cls}">{score}</span>
{f'<span class="muted"> {html.escape(report.label)}{threshold}</span>' if report.label else ""}
<div class="muted">{meta}</div>{reason}</header>
<main>
<section><h3>Source</h3><div class="text" id="source">{source_html}</div></section>
<section><h3>Target</h3><div class="text" id="target">{target_html}</div></section>
{f"<section><h3>Method details</h3><table>{sub_rows}</table></section>" if details and sub_rows else ""}
<section><h3>Findings ({len(report.findings)})</h3>{findings_html}</section>
{claims_section}
{unscored_section}
{order_section}
</main>
<script type="application/json" id="report-data">{data}</script>
<script>{_JS}</script></body></html>"""


def write_html(
    report: Report, source: str, target: str, path: str | Path, title: str | None = None, details: bool = False
) -> Path:
    """The web report in ``path``; ``details``: with the method's own numbers (sub-scores) too."""
    path = Path(path)
    page = render_html(report, source, target, title or f"halluscope · {report.method}", details=details)
    path.write_text(page, encoding="utf-8")
    return path


def report_json_with_texts(report: Report, source: str, target: str) -> str:
    """Report JSON plus the texts it indexes into, for tools that render later."""
    return json.dumps({"source": source, "target": target, "report": json.loads(report.model_dump_json())})
