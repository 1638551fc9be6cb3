"""The web report: one self-contained HTML page for a Report.

Source and target side by side; hallucinated target spans highlighted (hover shows the description,
click jumps to and flashes the evidence in the source); sub-scores; findings list; and, for methods that
reason about event order, the events in target order with the inverted pairs.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from halluscope.records import Evidence, Report, Span

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


def _highlight(text: str, marks: list[tuple[Span, int | str, str, str]]) -> str:
    """HTML of ``text`` with possibly overlapping spans marked. ``marks``: (span, finding id, css class, title)."""
    cuts = {0, len(text)}
    for span, *_ in marks:
        cuts.update((max(0, min(span.start, len(text))), max(0, min(span.end, len(text)))))
    bounds = sorted(cuts)
    out: list[str] = []
    for a, b in zip(bounds, bounds[1:]):
        if a == b:
            continue
        piece = html.escape(text[a:b])
        covering = [(fid, cls, title) for span, fid, cls, title in marks if span.start <= a and b <= span.end]
        if not covering:
            out.append(piece)
            continue
        ids = " ".join(str(fid) for fid, _, _ in covering)
        title = html.escape(" | ".join(dict.fromkeys(t for _, _, t in covering)), quote=True)
        ends = [
            str(fid + 1)
            for span, fid, cls, _ in marks  # finding numbers, shown where their span ends
            if isinstance(fid, int) and fid >= 0 and cls != "ev" and span.end == b and span.start <= a
        ]
        number = f' data-n="{" ".join(dict.fromkeys(ends))}"' if ends else ""
        out.append(f'<mark class="{covering[0][1]}" data-f="{ids}"{number} title="{title}">{piece}</mark>')
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


def render_html(report: Report, source: str, target: str, title: str = "halluscope report") -> str:
    target_marks: list[tuple[Span, int | str, str, str]] = []
    source_marks: list[tuple[Span, int | str, str, str]] = []
    for i, f in enumerate(report.findings):
        cls = _KIND_CLASS.get(f.kind, "other")
        for span in f.target_spans:
            target_marks.append((span, i, cls, f.description))
        for ev in f.evidence:
            if ev.span is not None:
                source_marks.append((ev.span, i, "ev", f"evidence ({ev.relation}) for finding {i + 1}"))
    unscored_verdicts = [v for v in report.verdicts if v.label == "unscored"]
    for j, v in enumerate(unscored_verdicts):  # not a finding: the claim could not be judged, and the page says why
        for span in v.claim.target_spans:
            target_marks.append((span, f"u{j}", "unscored", f"unscored: {v.reason or 'no reason recorded'}"))
    for v in report.verdicts:  # supporting evidence of verdicts also shows in the source
        for ev in v.evidence:
            if ev.span is not None and ev.relation == "supports":
                source_marks.append((ev.span, -1, "ev", f"supports: {v.claim.text[:80]}"))

    score_cls = "good" if report.label == "consistent" else "bad"  # the label, which never contradicts the findings
    score = "unscored" if report.score is None else f"{report.score:.3f}"
    sub_rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{_fmt(v)}</td></tr>" for k, v in report.subscores.items())
    finding_items = []
    for i, f in enumerate(report.findings):
        where = "; ".join(html.escape(s.of(target)) for s in f.target_spans) or "<i>not located in the text</i>"
        evid = "".join(
            f"<div class='muted'>evidence{_chunk_note(e)} ({html.escape(e.relation)}): "
            f"“{html.escape(e.text[:300])}”</div>"
            for e in f.evidence
        )
        finding_items.append(
            f"<li id='finding-{i}'><span class='kind'>{html.escape(f.kind)}</span>{html.escape(f.description)}"
            f"<div class='muted'>target: {where}</div>{evid}"
            + (f"<div class='muted'>fix: {html.escape(f.fix)}</div>" if f.fix else "")
            + "</li>"
        )
    events = [c for c in report.claims if c.kind == "event"]
    order_section = ""
    if events:
        rows = "".join(
            f"<tr><td>{c.order if c.order is not None else ''}</td><td>{html.escape(c.text)}</td></tr>" for c in events
        )
        inversions = [f for f in report.findings if f.kind == "event_order"]
        inv = "".join(f"<li>{html.escape(f.description)}</li>" for f in inversions) or "<li>none</li>"
        order_section = (
            "<section class='full'><h3>Events in target order</h3>"
            f"<table><tr><th>#</th><th>event</th></tr>{rows}</table><h4>Order violations</h4><ul>{inv}</ul></section>"
        )
    claims_section = ""
    if report.verdicts:
        claim_rows = "".join(
            f"<tr><td>{n}</td><td>{html.escape(v.claim.text)}</td>"
            f"<td class='{'ok' if v.label == 'supported' else 'bad' if v.label != 'unscored' else 'muted'}'>"
            f"{html.escape(v.label)}</td><td>{''.join(_evidence_line(e) for e in v.evidence) or '–'}</td></tr>"
            for n, v in enumerate(report.verdicts, 1)
        )
        claims_section = (
            f"<section class='full'><h3>Claims ({len(report.verdicts)}), passing ones too</h3>"
            "<table><tr><th>#</th><th>claim</th><th>verdict</th><th>evidence</th></tr>"
            f"{claim_rows}</table></section>"
        )
    unscored = len(unscored_verdicts)
    unscored_section = ""
    if unscored_verdicts:
        items = "".join(
            f"<li id='unscored-{j}'>{html.escape(v.claim.text)}"
            f"<div class='muted'>not judged: {html.escape(v.reason or 'no reason recorded')}</div></li>"
            for j, v in enumerate(unscored_verdicts)
        )
        unscored_section = (
            f"<section class='full'><h3>Unscored claims ({unscored})</h3><p class='muted'>Neither "
            "supported nor flagged: no valid verdict was given for these claims (dotted underline "
            f"in the target).</p><ol class='findings'>{items}</ol></section>"
        )
    u = report.usage
    meta = (
        f"{html.escape(report.method)} · {html.escape(report.model or 'no LLM')} · {u.calls} LLM calls · "
        f"{u.prompt_tokens + u.completion_tokens} tokens{u.cached_note()} · {u.cache_hits} cache hits · "
        f"{report.elapsed_s:.2f}s" + (f" · {unscored} unscored claims" if unscored else "")
    )
    reason = (
        f"<div class='bad'>could not score: {html.escape(report.unscored_reason)}</div>"
        if report.unscored_reason
        else ""
    )
    findings_html = (
        f"<ol class='findings'>{''.join(finding_items)}</ol>" if finding_items else "<p class='muted'>none</p>"
    )
    data = _script_json(report.model_dump_json())
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{_CSS}</style></head><body>
<header><h1>{html.escape(title)}</h1><span class="score {score_cls}">{score}</span>
{f'<span class="muted"> {html.escape(report.label)}</span>' if report.label else ""}
<div class="muted">{meta}</div>{reason}</header>
<main>
<section><h3>Source</h3><div class="text" id="source">{_highlight(source, source_marks)}</div></section>
<section><h3>Target</h3><div class="text" id="target">{_highlight(target, target_marks)}</div></section>
<section><h3>Sub-scores</h3><table>{sub_rows or "<tr><td>none</td></tr>"}</table></section>
<section><h3>Findings ({len(report.findings)})</h3>{findings_html}</section>
{claims_section}
{unscored_section}
{order_section}
</main>
<script type="application/json" id="report-data">{data}</script>
<script>{_JS}</script></body></html>"""


def write_html(report: Report, source: str, target: str, path: str | Path, title: str | None = None) -> Path:
    path = Path(path)
    path.write_text(render_html(report, source, target, title or f"halluscope · {report.method}"), encoding="utf-8")
    return path


def report_json_with_texts(report: Report, source: str, target: str) -> str:
    """Report JSON plus the texts it indexes into, for tools that render later."""
    return json.dumps({"source": source, "target": target, "report": json.loads(report.model_dump_json())})
