"""Load and fault benchmark of the HTTP service, all on 127.0.0.1 against a stub model endpoint.

    python benchmarks/service_load.py [--body-mb 300] [--body-rounds 3] [--options 2000] [--concurrent 200]
                                      [--job-items 40] [--long-target-chars 100000] [--latency-ms 20]
                                      [--gate-checks 4] [--gate-source-chars 395000] [--gate-cpu-workers N]
                                      [--only body options judges concurrent limits kill health hostile slow gate]
                                      [--out FILE.json]

Scenarios (each starts its own server process with ``python -m halluscope.server``; the light versions run in
tests/test_server_process.py):

* ``body``: a POST declaring a ``--body-mb`` MB Content-Length, the client sending it as fast as it can until
  the answer comes: without a token (401), with it (413), and chunked with no Content-Length (413). Time to
  the answer and the server's resident memory before, after and at its peak (VmHWM).
* ``options``: ``--options`` /check requests, each with its own options (geval ``max_tokens`` = 1..N), 16 at
  a time: memory, open files, the method cache's size.
* ``judges``: ``--options`` probe /check requests, each naming its own judge model (each instance builds a
  judge client; evicted instances must close it): memory growth, open files, ``cache.sqlite`` handles. The
  baseline (``rss_before_mb``) is read when the server reports ready, that is after its start-up, which
  imports the built-in methods and their libraries (``halluscope.server.warmup``); growth is also reported
  from after the first request alone and after the first tenth (``options`` reports the first two as well).
* ``hostile``: 5 rounds of ``--hostile`` geval checks at once whose every reply is 196 KB of ``<think>``
  (parsed, refused), while /health is polled every 20 ms: its p50/p99/max latency; first the same with
  ordinary replies (the control: what the machine's load alone costs).
* ``slow``: ``--slow`` clients send a /check body at 1 byte/s to a server with 4 slots, no queue and a 10 s body
  timeout, while a fifth client checks a pair: its status and time; the slow ones get 408.
* ``concurrent``: ``--concurrent`` /check requests at once with the default limits: status counts.
* ``limits``: the same against a server with 4 slots and a queue of 16: every request is answered or refused
  with 429/503 and Retry-After, none dropped.
* ``kill``: a geval job of ``--job-items`` pairs; the stub answers half the requests and holds the rest; the
  server is killed with SIGKILL, restarted on the same folder, and resumes: items lost, items recorded twice,
  requests for prompts the stub had already answered (must be 0).
* ``gate``: ``--gate-checks`` (4) ``gate`` checks at once on a ``--gate-source-chars`` (395,000) source without
  sentence breaks while /health is polled every 20 ms: its p50/p99/max latency and each check's time. The server
  runs them in its worker processes (``--cpu-workers``, default min(2, CPUs)); ``--gate-cpu-workers`` sets that
  flag (0: on the worker threads, as before the processes).
* ``health``: /health latency, probed every 50 ms, while a ``dcr`` check of a ``--long-target-chars`` target
  runs (sentence splitting and span location on the worker loop, not the HTTP loop).

Numbers depend on the machine (the 1-minute load average is recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's tests/ helpers
from tests import loadtest  # noqa: E402

TOKEN = "bench-token"


def scenario_body(home: Path, stub: loadtest.Proc, args: argparse.Namespace) -> dict[str, Any]:
    with loadtest.start_server(home / "body", stub=stub, token=TOKEN) as server:
        declared = args.body_mb * 1_000_000
        return loadtest.huge_body(server, TOKEN, declared=declared, send_up_to=declared, rounds=args.body_rounds)


def scenario_options(home: Path, stub: loadtest.Proc, args: argparse.Namespace) -> dict[str, Any]:
    with loadtest.start_server(home / "options", stub=stub, token=TOKEN) as server:
        return loadtest.distinct_options(server, TOKEN, n=args.options, concurrency=16, timeout_s=300)


def scenario_judges(home: Path, stub: loadtest.Proc, args: argparse.Namespace) -> dict[str, Any]:
    # every judge name is allowed here: the scenario measures what distinct judges cost, not the allow list
    with loadtest.start_server(home / "judges", "--allow-model", "*", stub=stub, token=TOKEN) as server:
        return loadtest.probe_judge_options(server, TOKEN, n=args.options, concurrency=16, timeout_s=600)


def scenario_hostile(home: Path, stub: loadtest.Proc, args: argparse.Namespace) -> dict[str, Any]:
    with loadtest.start_server(home / "hostile", "--timeout", "120", stub=stub, token=TOKEN) as server:
        control = loadtest.health_under_hostile_replies(server, TOKEN, hostile=args.hostile, marker=False)
        hostile = loadtest.health_under_hostile_replies(server, TOKEN, hostile=args.hostile)
        return {"control_ordinary_replies": control, "hostile_replies": hostile}


def scenario_slow(home: Path, stub: loadtest.Proc, args: argparse.Namespace) -> dict[str, Any]:
    limits = ("--max-in-flight", "4", "--max-queue", "0", "--body-timeout", "10")
    with loadtest.start_server(home / "slow", *limits, stub=stub, token=TOKEN) as server:
        out = loadtest.slow_senders(server, TOKEN, slow=args.slow)
        out["limits"] = " ".join(limits)
        return out


def scenario_concurrent(home: Path, stub: loadtest.Proc, args: argparse.Namespace) -> dict[str, Any]:
    with loadtest.start_server(home / "concurrent", stub=stub, token=TOKEN) as server:
        out = loadtest.concurrent_checks(server, TOKEN, n=args.concurrent, timeout_s=300)
        out["rss_after_mb"] = round(loadtest.rss_mb(server.pid), 1)
        return out


def scenario_limits(home: Path, stub: loadtest.Proc, args: argparse.Namespace) -> dict[str, Any]:
    limits = ("--max-in-flight", "4", "--max-queue", "16", "--queue-timeout", "20")
    with loadtest.start_server(home / "limits", *limits, stub=stub, token=TOKEN) as server:
        out = loadtest.concurrent_checks(server, TOKEN, n=args.concurrent, timeout_s=300)
        out["limits"] = " ".join(limits)
        return out


def scenario_kill(home: Path, stub: loadtest.Proc, args: argparse.Namespace) -> dict[str, Any]:
    run = loadtest.kill_resume(
        home / "kill",
        items=args.job_items,
        kill_after=args.job_items // 2,
        concurrency=4,
        latency_ms=args.latency_ms,
        timeout_s=300,
    )
    return run.summary()


def scenario_health(home: Path, stub: loadtest.Proc, args: argparse.Namespace) -> dict[str, Any]:
    sentence = "The ferry across the bay was paid for by the city and a regional grant of two million. "
    target = (sentence * (args.long_target_chars // len(sentence) + 1))[: args.long_target_chars]
    source = "The ferry across the bay costs three million; a regional grant pays two thirds of it."
    with loadtest.start_server(home / "health", "--timeout", "600", stub=stub, token=TOKEN) as server:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        result: dict[str, Any] = {}

        def long_check() -> None:
            started = time.perf_counter()
            r = httpx.post(
                server.url + "/check",
                json={"source": source, "target": target, "method": "dcr"},
                headers=headers,
                timeout=900,
            )
            result.update(status=r.status_code, check_seconds=round(time.perf_counter() - started, 2))

        with httpx.Client(base_url=server.url, timeout=60) as probe:  # one kept-alive connection

            def health_ms() -> float:
                t = time.perf_counter()
                probe.get("/health")
                return 1000 * (time.perf_counter() - t)

            idle = sorted(health_ms() for _ in range(20))
            worker = threading.Thread(target=long_check)
            worker.start()
            waits = []
            while worker.is_alive():
                waits.append(health_ms())
                time.sleep(0.05)
            worker.join()
        waits.sort()
        return {
            "target_chars": len(target),
            "method": "dcr",
            **result,
            "health_idle_p50_ms": round(idle[10], 1),
            "health_probes": len(waits),
            "health_p50_ms": round(waits[len(waits) // 2], 1) if waits else None,
            "health_max_ms": round(waits[-1], 1) if waits else None,
        }


def scenario_gate(home: Path, stub: loadtest.Proc, args: argparse.Namespace) -> dict[str, Any]:
    """``--gate-checks`` /check requests with the ``gate`` method at once, each on a ``--gate-source-chars``
    source without a sentence break (a target of the same kind, a tenth as long), while /health is polled every
    20 ms on one kept-alive connection: its p50/p99/max latency and each check's status and time."""
    words = "ferry bay city grant budget council vote harbour bridge tram "
    source = (words * (args.gate_source_chars // len(words) + 1))[: args.gate_source_chars]
    target = source[:4_000]  # source + target within the service's default 400,000 characters
    extra = () if args.gate_cpu_workers is None else ("--cpu-workers", str(args.gate_cpu_workers))
    with loadtest.start_server(home / "gate", "--timeout", "600", *extra, stub=stub, token=TOKEN) as server:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        checks: list[dict[str, Any]] = []

        def gate_check(i: int) -> None:
            started = time.perf_counter()
            r = httpx.post(
                server.url + "/check",
                headers=headers,
                timeout=900,
                json={"source": source + f" item {i}", "target": target, "method": "gate"},
            )
            checks.append({"status": r.status_code, "seconds": round(time.perf_counter() - started, 2)})

        with httpx.Client(base_url=server.url, timeout=60) as probe:

            def health_ms() -> float:
                t = time.perf_counter()
                probe.get("/health").raise_for_status()
                return 1000 * (time.perf_counter() - t)

            idle = sorted(health_ms() for _ in range(20))
            workers = [threading.Thread(target=gate_check, args=(i,)) for i in range(args.gate_checks)]
            for w in workers:
                w.start()
            waits = []
            while any(w.is_alive() for w in workers):
                waits.append(health_ms())
                time.sleep(0.02)
            for w in workers:
                w.join()
        waits.sort()

        def pct(p: float) -> float | None:
            return round(waits[min(len(waits) - 1, int(p * len(waits)))], 1) if waits else None

        return {
            "source_chars": len(source),
            "target_chars": len(target),
            "cpu_workers": args.gate_cpu_workers,
            "checks": checks,
            "health_idle_p50_ms": round(idle[10], 1),
            "health_probes": len(waits),
            "health_p50_ms": pct(0.5),
            "health_p99_ms": pct(0.99),
            "health_max_ms": round(waits[-1], 1) if waits else None,
        }


SCENARIOS = {
    "body": scenario_body,
    "options": scenario_options,
    "judges": scenario_judges,
    "concurrent": scenario_concurrent,
    "limits": scenario_limits,
    "kill": scenario_kill,
    "health": scenario_health,
    "hostile": scenario_hostile,
    "slow": scenario_slow,
    "gate": scenario_gate,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--body-mb", type=int, default=300)
    parser.add_argument("--body-rounds", type=int, default=3)
    parser.add_argument("--options", type=int, default=2000)
    parser.add_argument("--concurrent", type=int, default=200)
    parser.add_argument("--job-items", type=int, default=40)
    parser.add_argument("--long-target-chars", type=int, default=100_000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--hostile", type=int, default=4)
    parser.add_argument("--slow", type=int, default=4)
    parser.add_argument("--gate-checks", type=int, default=4)
    parser.add_argument("--gate-source-chars", type=int, default=395_000)
    parser.add_argument(
        "--gate-cpu-workers",
        type=int,
        default=None,
        help="the server's --cpu-workers in the gate scenario (default: the server's default)",
    )
    parser.add_argument("--only", nargs="*", choices=sorted(SCENARIOS))
    parser.add_argument("--out", help="also write the results as JSON here")
    args = parser.parse_args()
    results: dict[str, Any] = {"load_average_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="halluscope-load-") as tmp:
        home = Path(tmp)
        with loadtest.start_stub(home / "stub", latency_ms=args.latency_ms) as stub:
            for name in args.only or list(SCENARIOS):
                started = time.perf_counter()
                results[name] = SCENARIOS[name](home, stub, args)
                results[name]["scenario_seconds"] = round(time.perf_counter() - started, 1)
                print(f"## {name}\n{json.dumps(results[name], indent=1)}\n", flush=True)
    results["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
