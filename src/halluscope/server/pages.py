"""The service's pages. :func:`render_job_page`: the web report of a job, one self-contained page listing its
items (score, label, findings), sortable by any column (click a header; ``#sort=score`` or ``#sort=-findings``
in the URL sorts on load), each row opening the item's span-highlight report rendered by
:func:`halluscope.report.render_html`. The dashboard at ``GET /`` is :mod:`halluscope.server.dashboard`. Every
value from a request is HTML-escaped."""

from __future__ import annotations

import html
from typing import Any

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{padding:14px 22px;background:#fff;border-bottom:1px solid #ddd}
header h1{font-size:18px;margin:0 0 6px}.muted{color:#777;font-size:13px}
.bar{height:8px;background:#eee;border-radius:4px;max-width:420px;margin:8px 0}
.bar div{height:8px;background:#1a73e8;border-radius:4px}
main{padding:16px 22px}table{border-collapse:collapse;font-size:14px;background:#fff;border:1px solid #ddd}
td,th{border-bottom:1px solid #eee;padding:5px 12px;text-align:left}
th{cursor:pointer;user-select:none;background:#f3f3f3}th[aria-sort=ascending]::after{content:" \\25B2"}
th[aria-sort=descending]::after{content:" \\25BC"}td.num{text-align:right;font-variant-numeric:tabular-nums}
.bad{color:#b3261e;font-weight:600}.good{color:#1b6e3a;font-weight:600}.pending{color:#999}
"""

_JS = """
(function(){
  var table = document.getElementById('items'), body = table.tBodies[0];
  function value(row, key, numeric){
    var v = row.dataset[key];
    if (numeric) { return (v === undefined || v === '') ? null : parseFloat(v); }
    return v || '';
  }
  function sortBy(key, desc){
    var th = table.querySelector('th[data-key="' + key + '"]');
    if (!th) return;
    var numeric = th.dataset.type === 'num';
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function(a, b){
      var x = value(a, key, numeric), y = value(b, key, numeric);
      if (x === null && y === null) return value(a, 'index', true) - value(b, 'index', true);
      if (x === null) return 1;            /* items without a value (unscored, pending) go last */
      if (y === null) return -1;
      var c = numeric ? x - y : String(x).localeCompare(String(y));
      if (c === 0) c = value(a, 'index', true) - value(b, 'index', true);
      return desc ? -c : c;
    });
    rows.forEach(function(r){ body.appendChild(r); });
    table.querySelectorAll('th').forEach(function(h){ h.removeAttribute('aria-sort'); });
    th.setAttribute('aria-sort', desc ? 'descending' : 'ascending');
    table.dataset.sorted = (desc ? '-' : '') + key;
  }
  table.querySelectorAll('th[data-key]').forEach(function(th){
    th.addEventListener('click', function(){
      sortBy(th.dataset.key, th.getAttribute('aria-sort') === 'ascending');
    });
  });
  var m = /sort=(-?)(\\w+)/.exec(location.hash);
  if (m) sortBy(m[2], m[1] === '-');
})();
"""


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def render_job_page(job: dict[str, Any], items: list[dict[str, Any]], shown_limit: int) -> str:
    """``job``: the job's info (see ``JobStore.get``); ``items``: ``JobStore.summaries`` rows."""
    rows = []
    for it in items:
        index = it["idx"]
        item_id = it["item_id"] or it["eid"] or str(index)
        link = f'<a href="items/{index}?format=html">{html.escape(item_id)}</a>'
        if it["status"] is None:
            state, label, score_cell, findings = "pending", "", "<span class='pending'>pending</span>", ""
        elif it["has"]:
            state = "scored" if it["score"] is not None else "unscored"
            label = it["label"] or ("unscored" if it["score"] is None else "")
            score_cell = (
                f"{it['score']:.3f}"
                if it["score"] is not None
                else f"<span class='bad' title='{html.escape(it['reason'] or '', quote=True)}'>unscored</span>"
            )
            findings = str(it["findings"])
        else:
            state, label, findings = "error", "error", ""
            score_cell = (
                f"<span class='bad' title='{html.escape(it['error'] or '', quote=True)}'>error {it['status']}</span>"
            )
        label_cls = {"consistent": "good", "inconsistent": "bad"}.get(label, "")
        rows.append(
            f'<tr data-index="{index}" data-id="{html.escape(item_id, quote=True)}" data-score="{_num(it["score"])}" '
            f'data-label="{html.escape(label, quote=True)}" data-findings="{findings}" data-state="{state}">'
            f'<td class="num">{index}</td><td>{link}</td><td class="num">{score_cell}</td>'
            f'<td class="{label_cls}">{html.escape(label)}</td><td class="num">{findings}</td></tr>'
        )
    total, done = job["total"], job["done"]
    pct = 100.0 * done / total if total else 100.0
    mean = "–" if job["mean_score"] is None else f"{job['mean_score']:.3f}"
    u = job["usage"]
    more = (
        f"<p class='muted'>Showing the first {shown_limit} of {total} items (add <code>?limit=N</code>).</p>"
        if total > shown_limit
        else ""
    )
    title = f"halluscope job {job['name'] or job['id']}"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{_CSS}</style></head><body>
<header><h1>{html.escape(title)}</h1>
<div><b id="status">{html.escape(job["status"])}</b> · {html.escape(job["method"])} · {done}/{total} items ·
scored {job["scored"]} · unscored {job["unscored"]} · errors {job["errors"]} · mean score {mean}</div>
<div class="bar"><div style="width:{pct:.1f}%"></div></div>
<div class="muted">{u.calls} LLM calls · {u.prompt_tokens + u.completion_tokens} tokens · {u.cache_hits} cache hits ·
dataset {html.escape(job["dataset"] or "items sent with the job")} · attempts {job["attempts"]}</div></header>
<main>{more}
<table id="items"><thead><tr><th data-key="index" data-type="num">#</th><th data-key="id">item</th>
<th data-key="score" data-type="num">score</th><th data-key="label">label</th>
<th data-key="findings" data-type="num">findings</th></tr></thead>
<tbody>{"".join(rows)}</tbody></table></main>
<script>{_JS}</script></body></html>"""
