"""Orchestration overhead of halluscope's LLM layer against a local OpenAI-compatible endpoint.

    python benchmarks/overhead.py [--calls 640] [--concurrency 32] [--latency-ms 50] [--pairs 200] [--out FILE]

Starts its own endpoint in a subprocess (a bare ASGI app under uvicorn) that sleeps a fixed latency per
request and returns a canned reply, then measures:

(a) overhead: ``LLM.generate`` through the OpenAI-compatible backend (cache off) vs raw httpx calls, same
    number of calls, same concurrency (goal: <= 3 % more wall time). The raw baseline uses the same small
    client pools as the backend, so the difference is orchestration alone; a naive single-client httpx
    baseline is shown too (httpcore's one big pool costs ~4x more CPU per call);
(b) throughput at the given concurrency vs the ideal ``calls * latency / concurrency`` (goal: >= 0.9);
(c) a cached re-run of the same calls (goal: 0 requests reach the endpoint; cache hits reported);
(d) the ``geval`` method over N pairs, to show method-level overhead.

Rounds of (a) alternate raw and halluscope to spread machine noise; the table reports medians. All
numbers share one machine with the endpoint, so they depend on what else the CPU is doing (the 1-minute
load average is recorded).
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
import tempfile
import time
from pathlib import Path

from halluscope.server.stub import answer_lifespan, chat_completion, read_body, send_json

CANNED_REPLY = '{"reason": "Every statement is supported by the source.", "score": 4}'


# --- the endpoint (runs in its own process) -------------------------------------------------------------

class FixedLatencyEndpoint:
    """ASGI app: POST /v1/chat/completions sleeps ``latency_s`` and returns the canned reply;
    GET /stats returns how many completions it served; GET /health answers at once."""

    def __init__(self, latency_s: float):
        self.latency_s = latency_s
        self.served = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        body, _ = await read_body(receive)
        path = scope["path"]
        if path.endswith("/chat/completions"):
            request = json.loads(body)
            await asyncio.sleep(self.latency_s)
            self.served += 1
            prompt_words = sum(len(m["content"].split()) for m in request["messages"])
            payload = chat_completion(f"bench-{self.served}", request.get("model", "bench"), CANNED_REPLY,
                                      prompt_words, len(CANNED_REPLY.split()))
            await send_json(send, 200, payload)
        elif path == "/stats":
            await send_json(send, 200, {"served": self.served})
        else:
            await send_json(send, 200, {"ok": True})


def serve(port: int, latency_ms: float) -> None:
    import uvicorn

    uvicorn.run(FixedLatencyEndpoint(latency_ms / 1000), host="127.0.0.1", port=port, log_level="warning",
                access_log=False, lifespan="on")


class EndpointProcess:
    def __init__(self, latency_ms: float, ready_timeout_s: float = 30.0):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.latency_ms = latency_ms
        self.ready_timeout_s = ready_timeout_s

    def __enter__(self) -> "EndpointProcess":
        import httpx

        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", "--port", str(self.port),
                                      "--latency-ms", str(self.latency_ms)])
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"endpoint exited with code {self.proc.returncode}")
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).raise_for_status()
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        self.__exit__()
        raise RuntimeError(f"endpoint not ready after {self.ready_timeout_s}s")

    def served(self) -> int:
        import httpx

        return httpx.get(f"http://127.0.0.1:{self.port}/stats", timeout=5).json()["served"]

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


# --- the client side ------------------------------------------------------------------------------------

def messages_for(i: int, tag: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You are a careful fact-checker."},
            {"role": "user", "content": f"[{tag}] Is statement number {i} supported by the source? Answer in JSON."}]


async def run_raw(base_url: str, calls: int, concurrency: int, tag: str, pooled: bool = False) -> tuple[float, float]:
    """The baseline: the same requests with bare httpx and a semaphore, nothing else. ``pooled`` spreads them
    over the same small client pools halluscope's backend uses, so the difference is orchestration only."""
    import httpx

    from halluscope.llm.openai_compat import _ClientPool

    def make(limits: httpx.Limits) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=base_url, timeout=120, limits=limits)

    pool = _ClientPool(concurrency, make) if pooled else None
    client = None if pooled else make(httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency))
    post = pool.post if pool else client.post
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> str:
        async with sem:
            body = {"model": "bench", "messages": messages_for(i, tag), "temperature": 0.0, "max_tokens": 256, "seed": 0}
            resp = await post("/chat/completions", json=body)
            resp.raise_for_status()
            return resp.json()["choices"][0]["message"]["content"]

    await asyncio.gather(*(one(-1 - i) for i in range(concurrency)))  # open the connections first
    started, cpu_started = time.perf_counter(), time.process_time()
    replies = await asyncio.gather(*(one(i) for i in range(calls)))
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    await (pool.aclose() if pool else client.aclose())
    assert all(r == CANNED_REPLY for r in replies)
    return elapsed, cpu


def halluscope_llm(base_url: str, concurrency: int, cache_path: Path | None):
    from halluscope.config import Config
    from halluscope.llm import get_llm

    config = Config(model="bench", base_url=base_url, api_key=None, max_concurrency=concurrency,
                    max_tokens=256, cache=cache_path is not None, cache_path=cache_path or Path("unused"))
    return get_llm(config)


async def run_halluscope(llm, calls: int, tag: str) -> tuple[float, float, object]:
    from halluscope.llm import track_calls

    with track_calls() as log:
        started, cpu_started = time.perf_counter(), time.process_time()
        replies = await asyncio.gather(*(llm.generate(messages_for(i, tag)) for i in range(calls)))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    assert all(r.text == CANNED_REPLY for r in replies)
    return elapsed, cpu, log.usage


async def run_geval(base_url: str, pairs: int, concurrency: int) -> tuple[float, list]:
    from halluscope.config import Config
    from halluscope.methods.geval import GEval

    config = Config(model="bench", base_url=base_url, max_concurrency=concurrency, cache=False)
    method = GEval(config=config)

    def items_for(tag: str, n: int) -> list[tuple[str, str]]:
        return [(f"Source document {tag}{i}: the council approved the ferry line on Tuesday by a vote of 7 to 2.",
                 f"Summary {tag}{i}: the council approved the ferry line.") for i in range(n)]

    await method.acheck_many(items_for("warmup", concurrency), concurrency=concurrency)  # open the connections
    items = items_for("", pairs)
    started = time.perf_counter()
    reports = await method.acheck_many(items, concurrency=concurrency)
    return time.perf_counter() - started, reports


class _InstantBackend:
    """Answers at once, so what remains is halluscope's own per-call work (no network at all)."""

    name = "instant"
    max_concurrency = None
    context_window = None

    def count_tokens(self, text: str) -> None:
        return None

    async def generate(self, messages, params):
        from halluscope.llm import Completion
        from halluscope.records import Usage

        return Completion(text=CANNED_REPLY, model=self.name, usage=Usage(calls=1, prompt_tokens=20, completion_tokens=10))


async def orchestration_cpu_us(calls: int, concurrency: int) -> float:
    from halluscope.llm import LLM, track_calls

    llm = LLM(_InstantBackend(), cache=None, max_concurrency=concurrency)
    with track_calls():
        started = time.process_time()
        await asyncio.gather(*(llm.generate(messages_for(i, "instant")) for i in range(calls)))
    return 1e6 * (time.process_time() - started) / calls


async def benchmark(args: argparse.Namespace, endpoint: EndpointProcess) -> dict:
    latency_s = args.latency_ms / 1000
    ideal_s = args.calls * latency_s / args.concurrency
    llm = halluscope_llm(endpoint.base_url, args.concurrency, None)

    await run_halluscope(llm, args.concurrency * 2, "warmup")  # open the connections

    times: dict[str, list[float]] = {"raw": [], "raw_pooled": [], "halluscope": []}
    cpu: dict[str, list[float]] = {"raw": [], "raw_pooled": [], "halluscope": []}
    hs_usage = None
    for r in range(args.rounds):
        for kind in ("raw", "raw_pooled", "halluscope"):
            if kind == "halluscope":
                elapsed, cpu_s, hs_usage = await run_halluscope(llm, args.calls, f"hs-{r}")
            else:
                elapsed, cpu_s = await run_raw(endpoint.base_url, args.calls, args.concurrency, f"{kind}-{r}",
                                               pooled=kind == "raw_pooled")
            times[kind].append(elapsed)
            cpu[kind].append(cpu_s)
    wall = {k: statistics.median(v) for k, v in times.items()}
    cpu_ms = {k: 1000 * statistics.median(v) / args.calls for k, v in cpu.items()}
    raw_s, hs_s = wall["raw_pooled"], wall["halluscope"]

    instant_us = statistics.median([await orchestration_cpu_us(5000, args.concurrency) for _ in range(3)])

    with tempfile.TemporaryDirectory() as tmp:
        cached_llm = halluscope_llm(endpoint.base_url, args.concurrency, Path(tmp) / "cache.sqlite")
        fill_s, _, fill_usage = await run_halluscope(cached_llm, args.calls, "cache")
        served_before = endpoint.served()
        rerun_s, _, rerun_usage = await run_halluscope(cached_llm, args.calls, "cache")
        served_during_rerun = endpoint.served() - served_before

    geval_s, reports = await run_geval(endpoint.base_url, args.pairs, args.concurrency)
    geval_calls = sum(r.usage.calls for r in reports)
    geval_ideal_s = geval_calls * latency_s / args.concurrency
    geval_raw_s, _ = await run_raw(endpoint.base_url, geval_calls, args.concurrency, "geval-raw", pooled=True)

    return {
        "setup": {"calls": args.calls, "concurrency": args.concurrency, "latency_ms": args.latency_ms,
                  "rounds": args.rounds, "pairs": args.pairs, "cpus": os.cpu_count(),
                  "loadavg_1m": round(os.getloadavg()[0], 2)},
        "overhead": {"raw_httpx_s": raw_s, "halluscope_s": hs_s, "overhead_pct": 100 * (hs_s / raw_s - 1),
                     "naive_raw_httpx_s": wall["raw"], "overhead_vs_naive_pct": 100 * (hs_s / wall["raw"] - 1),
                     "rounds_s": times, "client_cpu_ms_per_call": cpu_ms,
                     "orchestration_cpu_us_per_call_no_network": instant_us,
                     "usage_per_round": hs_usage.model_dump() if hs_usage else None},
        "throughput": {"ideal_s": ideal_s, "halluscope_s": hs_s, "efficiency": ideal_s / hs_s,
                       "raw_efficiency": ideal_s / raw_s, "naive_raw_efficiency": ideal_s / wall["raw"]},
        "cache": {"fill_s": fill_s, "fill_calls": fill_usage.calls, "rerun_s": rerun_s,
                  "rerun_llm_calls": rerun_usage.calls, "rerun_cache_hits": rerun_usage.cache_hits,
                  "endpoint_requests_during_rerun": served_during_rerun},
        "geval": {"pairs": args.pairs, "wall_s": geval_s, "ideal_s": geval_ideal_s, "raw_httpx_same_calls_s": geval_raw_s,
                  "efficiency": geval_ideal_s / geval_s, "overhead_vs_raw_pct": 100 * (geval_s / geval_raw_s - 1),
                  "scored": sum(r.score is not None for r in reports),
                  "llm_calls_per_pair": geval_calls / args.pairs,
                  "prompt_tokens_per_pair": sum(r.usage.prompt_tokens for r in reports) / args.pairs,
                  "completion_tokens_per_pair": sum(r.usage.completion_tokens for r in reports) / args.pairs},
    }


def print_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    s, o, t, c, g = (result[k] for k in ("setup", "overhead", "throughput", "cache", "geval"))
    table = Table(title=f"{s['calls']} calls, concurrency {s['concurrency']}, {s['latency_ms']:g} ms per call "
                        f"(median of {s['rounds']} rounds; load avg {s['loadavg_1m']} on {s['cpus']} CPUs)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("goal", justify="right")
    cpu = o["client_cpu_ms_per_call"]
    table.add_row("(a) raw httpx, same client pools: wall time", f"{o['raw_httpx_s']:.3f} s", "")
    table.add_row("(a) halluscope LLM.generate: wall time", f"{o['halluscope_s']:.3f} s", "")
    table.add_row("(a) orchestration overhead (wall time)", f"{o['overhead_pct']:+.1f} %", "<= 3 %")
    table.add_row("(a) naive raw httpx (one client): wall time / halluscope vs it",
                  f"{o['naive_raw_httpx_s']:.3f} s / {o['overhead_vs_naive_pct']:+.1f} %", "")
    table.add_row("(a) client CPU per call: naive raw / pooled raw / halluscope",
                  f"{cpu['raw']:.2f} / {cpu['raw_pooled']:.2f} / {cpu['halluscope']:.2f} ms", "")
    table.add_row("(a) halluscope's own CPU per call, instant backend (no network)",
                  f"{o['orchestration_cpu_us_per_call_no_network']:.0f} us", "")
    table.add_row("(b) ideal wall time (calls x latency / concurrency)", f"{t['ideal_s']:.3f} s", "")
    table.add_row("(b) throughput efficiency (ideal / actual)", f"{t['efficiency']:.3f}", ">= 0.9")
    table.add_row("(b) efficiency of pooled / naive raw httpx, for reference",
                  f"{t['raw_efficiency']:.3f} / {t['naive_raw_efficiency']:.3f}", "")
    table.add_row("(c) cached re-run: LLM calls", str(c["rerun_llm_calls"]), "0")
    table.add_row("(c) cached re-run: cache hits", str(c["rerun_cache_hits"]), str(s["calls"]))
    table.add_row("(c) cached re-run: requests reaching the endpoint", str(c["endpoint_requests_during_rerun"]), "0")
    table.add_row("(c) cached re-run wall time", f"{c['rerun_s']:.3f} s", "")
    table.add_row(f"(d) geval over {g['pairs']} pairs: wall time", f"{g['wall_s']:.3f} s", "")
    table.add_row("(d) geval: raw httpx (pooled), same number of calls", f"{g['raw_httpx_same_calls_s']:.3f} s", "")
    table.add_row("(d) geval: overhead vs raw", f"{g['overhead_vs_raw_pct']:+.1f} %", "")
    table.add_row("(d) geval: efficiency (ideal / actual)", f"{g['efficiency']:.3f}", "")
    table.add_row("(d) geval: LLM calls / prompt tokens / completion tokens per pair",
                  f"{g['llm_calls_per_pair']:.2f} / {g['prompt_tokens_per_pair']:.0f} / {g['completion_tokens_per_pair']:.0f}", "")
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=640)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # internal: run the endpoint
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.port, args.latency_ms)
        return
    with EndpointProcess(args.latency_ms) as endpoint:
        result = asyncio.run(benchmark(args, endpoint))
    print_table(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
