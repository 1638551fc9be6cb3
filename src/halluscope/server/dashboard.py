"""The dashboard at ``GET /``: recent jobs with their method, model, start time, duration, items, inconsistent and
unscored counts, mean score and a histogram of their item scores, filtered by status and method (a plain GET form,
no script needed), each linking to its report, whose rows open every item's span-highlight report. Served by the
same app; every value from a request or a job is HTML-escaped."""

from __future__ import annotations

import datetime as dt
import html
import json
from typing import Any
from urllib.parse import urlencode

from halluscope.server.pages import _CSS

HISTOGRAM_ITEMS = 2000
"""Items per job read for its histogram and counts (the first ones); the job's report lists them all."""
BINS = 10
STATUSES = ("queued", "running", "done", "failed", "cancelled")


def job_stats(store: Any, job: dict[str, Any]) -> dict[str, Any]:
    """Of a job's first :data:`HISTOGRAM_ITEMS` items: their scores, how many are inconsistent, how many were read,
    and the model that checked them (from the first finished report)."""
    items = store.summaries(job["id"], min(max(int(job.get("total") or 0), 1), HISTOGRAM_ITEMS))
    scores = [float(i["score"]) for i in items if i.get("score") is not None]
    model = None
    first = next((i["idx"] for i in items if i.get("has")), None)
    if first is not None:
        found = store.item(job["id"], first)
        report = found[1]["report"] if found is not None and found[1] is not None else None
        try:
            model = json.loads(report).get("model") if report else None
        except ValueError:
            model = None
    return {
        "scores": scores,
        "inconsistent": sum(i.get("label") == "inconsistent" for i in items),
        "read": len(items),
        "model": model,
    }


def histogram_svg(scores: list[float], bins: int = BINS) -> str:
    """An inline SVG of the scores in ``bins`` equal bins over [0, 1] (red low, green high), each bar titled."""
    if not scores:
        return '<span class="muted">–</span>'
    counts = [0] * bins
    for s in scores:
        counts[min(bins - 1, max(0, int(s * bins)))] += 1
    top = max(counts)
    width, height, bar = 10 * bins, 24, 10
    rects = []
    for i, n in enumerate(counts):
        h = 0 if n == 0 else max(2, round(height * n / top))
        hue = round(120 * (i + 0.5) / bins)  # 0 = red (score 0) ... 120 = green (score 1)
        lo, hi = i / bins, (i + 1) / bins
        rects.append(
            f'<rect x="{i * bar + 1}" y="{height - h}" width="{bar - 2}" height="{h}" fill="hsl({hue},60%,45%)">'
            f"<title>{n} item{'s' if n != 1 else ''} scored {lo:.1f}–{hi:.1f}</title></rect>"
        )
    return (
        f'<svg class="hist" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="scores of {len(scores)} items">{"".join(rects)}</svg>'
    )


def _when(ts: float | None) -> str:
    if ts is None:
        return "–"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(job: dict[str, Any]) -> str:
    started, finished = job.get("started"), job.get("finished")
    if started is None:
        return "–"
    end = finished if finished is not None else dt.datetime.now(dt.UTC).timestamp()
    seconds = max(0.0, end - started)
    text = f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return text if finished is not None else f"{text} so far"


def _select(name: str, chosen: str | None, values: list[str]) -> str:
    options = [f'<option value=""{" selected" if not chosen else ""}>any</option>']
    for value in values:
        selected = " selected" if value == chosen else ""
        v = html.escape(value, quote=True)
        options.append(f'<option value="{v}"{selected}>{html.escape(value)}</option>')
    return f'<label>{name} <select name="{name}" onchange="this.form.submit()">{"".join(options)}</select></label>'


def render_dashboard(
    jobs: list[dict[str, Any]],
    stats: dict[str, dict[str, Any]],
    limit: int,
    status: str | None = None,
    method: str | None = None,
    methods: list[str] | None = None,
) -> str:
    """The page: ``jobs`` (``JobInfo`` dicts, newest first, already filtered), ``stats`` by job id
    (:func:`job_stats`), the filters in force and the methods to offer."""
    rows = []
    for job in jobs:
        links = job.get("links") or {}
        report = html.escape(links.get("report", f"/jobs/{job['id']}/report"), quote=True)
        info = html.escape(links.get("self", f"/jobs/{job['id']}"), quote=True)
        name = html.escape(job.get("name") or job["id"])
        state = html.escape(job["status"])
        cls = {"done": "good", "failed": "bad", "cancelled": "pending"}.get(job["status"], "")
        s = stats.get(job["id"], {})
        mean = "–" if job.get("mean_score") is None else f"{job['mean_score']:.3f}"
        partial = "" if s.get("read", 0) >= job["total"] else f' title="of the first {s.get("read", 0)} items"'
        model = html.escape(s.get("model") or (job.get("options") or {}).get("model") or "–")
        rows.append(
            f'<tr data-id="{html.escape(job["id"], quote=True)}" data-status="{state}" '
            f'data-method="{html.escape(job["method"], quote=True)}">'
            f'<td><a href="{report}">{name}</a></td><td class="{cls}">{state}</td>'
            f"<td>{html.escape(job['method'])}</td><td>{model}</td>"
            f"<td>{_when(job.get('started'))}</td><td class='num'>{_duration(job)}</td>"
            f'<td class="num">{job["done"]}/{job["total"]}</td>'
            f'<td class="num{" bad" if s.get("inconsistent") else ""}"{partial}>{s.get("inconsistent", 0)}</td>'
            f'<td class="num">{job["unscored"]}</td><td class="num">{job["errors"]}</td>'
            f'<td class="num">{mean}</td><td>{histogram_svg(s.get("scores", []))}</td>'
            f'<td><a href="{report}">report</a> · <a href="{info}">json</a></td></tr>'
        )
    heads = (
        "job",
        "status",
        "method",
        "model",
        "started",
        "duration",
        "items done",
        "inconsistent",
        "unscored",
        "errors",
        "mean score",
        "scores (0 → 1)",
        "",
    )
    table = (
        "<table><thead><tr>"
        + "".join(f"<th>{h}</th>" for h in heads)
        + f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    filtered = bool(status or method)
    if not rows:
        table = (
            "<p class='muted'>No job matches these filters.</p>"
            if filtered
            else "<p class='muted'>No jobs yet: <code>POST /jobs</code> starts one (see <a href='/docs'>/docs</a>).</p>"
        )
    form = (
        '<form method="get" action="/" class="filters">'
        + _select("status", status, list(STATUSES))
        + _select("method", method, sorted(set(methods or []) | ({method} if method else set())))
        + f'<input type="hidden" name="limit" value="{limit}"><noscript><button>filter</button></noscript>'
        + (' <a href="/">clear</a>' if filtered else "")
        + "</form>"
    )
    more = ""
    if len(jobs) >= limit:
        query = urlencode({k: v for k, v in (("status", status), ("method", method), ("limit", limit * 2)) if v})
        more = f"<p class='muted'>The {limit} most recent jobs (<a href='/?{html.escape(query)}'>more</a>).</p>"
    done = [j for j in jobs if j["status"] == "done"]
    summary = f"{len(jobs)} job(s), newest first; {len(done)} done"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>halluscope jobs</title>
<style>{_CSS}.filters{{margin:0 0 12px;font-size:14px}}.filters label{{margin-right:14px}}
svg.hist{{vertical-align:middle;background:#f6f6f6;border-radius:3px}}</style></head><body>
<header><h1>halluscope jobs</h1>
<div class="muted">{summary} · each job's report opens every item with its spans highlighted ·
<a href="/docs">API</a> · <a href="/logout">log out</a></div></header>
<main>{form}{more}{table}</main></body></html>"""
