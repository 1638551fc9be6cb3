"""Scenarios against one running server: a huge body, many requests at once, many distinct options, /health while
hostile replies are parsed, slow senders."""

from __future__ import annotations

import asyncio
import json
import os
import select
import socket
import time
from collections import Counter
from typing import Any

import httpx

from tests.loadtest.processes import HOST, Proc, open_fds, peak_rss_mb, rss_mb

# --- scenario: a huge body --------------------------------------------------------------------------------


def send_declared_body(
    port: int,
    declared: int,
    *,
    token: str | None = None,
    path: str = "/check",
    chunked: bool = False,
    send_up_to: int = 64 * 2**20,
    timeout_s: float = 30.0,
) -> dict[str, Any]:
    """POST with ``Content-Length: declared`` (or chunked), sending body bytes until the answer arrives (at
    most ``send_up_to``). Returns the status, seconds to the answer, and body bytes the client got to send."""
    sock = socket.create_connection((HOST, port), timeout=timeout_s)
    head = f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
    if token is not None:
        head += f"Authorization: Bearer {token}\r\n"
    head += "Transfer-Encoding: chunked\r\n\r\n" if chunked else f"Content-Length: {declared}\r\n\r\n"
    chunk = b"x" * 2**16
    piece = b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk
    started = time.perf_counter()
    sock.sendall(head.encode())
    sock.setblocking(False)
    sent, answer = 0, b""
    deadline = started + timeout_s
    try:
        while b"\r\n\r\n" not in answer and time.perf_counter() < deadline:
            want_write = sent < min(declared, send_up_to)
            readable, writable, _ = select.select([sock], [sock] if want_write else [], [], 0.5)
            if readable:
                data = sock.recv(65536)
                if not data:
                    break
                answer += data
            elif writable:
                try:
                    sent += sock.send(piece)
                except BlockingIOError:
                    continue
                except OSError:  # the server closed after answering: read what it sent
                    sock.setblocking(True)
                    sock.settimeout(2)
                    try:
                        answer += sock.recv(65536)
                    except OSError:
                        pass
                    break
    finally:
        seconds = time.perf_counter() - started
        sock.close()
    status_line = answer.split(b"\r\n", 1)[0].decode("latin-1")
    status = int(status_line.split()[1]) if status_line.startswith("HTTP/") else 0
    return {"status": status, "seconds": round(seconds, 4), "sent_bytes": sent}


def huge_body(
    server: Proc, token: str, declared: int = 300_000_000, send_up_to: int = 64 * 2**20, rounds: int = 1
) -> dict[str, Any]:
    """401 without a token, 413 with it, 413 for a chunked body: latency and the server's memory."""
    before = rss_mb(server.pid)
    out: dict[str, Any] = {"declared_bytes": declared, "rss_before_mb": round(before, 1), "answers": []}
    for _ in range(rounds):
        out["answers"].append({"case": "no token", **send_declared_body(server.port, declared, send_up_to=send_up_to)})
        out["answers"].append(
            {"case": "token", **send_declared_body(server.port, declared, token=token, send_up_to=send_up_to)}
        )
        out["answers"].append(
            {
                "case": "token, chunked",
                **send_declared_body(
                    server.port, declared, token=token, chunked=True, path="/check/batch", send_up_to=send_up_to
                ),
            }
        )
    time.sleep(1.0)  # the server finishes a request (and frees its buffer) just after the client has the answer
    out["rss_after_mb"] = round(rss_mb(server.pid), 1)
    out["peak_rss_mb"] = round(peak_rss_mb(server.pid), 1)
    return out


# --- scenario: many requests at once ----------------------------------------------------------------------


async def _post_all(
    url: str, bodies: list[dict[str, Any]], headers: dict[str, str], concurrency: int, timeout_s: float
) -> list[tuple[int, dict[str, str]]]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=timeout_s) as client:

        async def one(body: dict[str, Any]) -> tuple[int, dict[str, str]]:
            async with sem:
                try:
                    r = await client.post(url, json=body, headers=headers)
                    return r.status_code, dict(r.headers)
                except httpx.HTTPError as exc:
                    return 0, {"error": f"{type(exc).__name__}: {exc}"}

        return list(await asyncio.gather(*(one(b) for b in bodies)))


def concurrent_checks(server: Proc, token: str | None, n: int = 200, timeout_s: float = 120.0) -> dict[str, Any]:
    """``n`` /check requests at once (distinct pairs, so each reaches the model): status counts. 0 = no
    answer (a dropped request); every 429/503 must carry Retry-After."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    bodies = [
        {
            "source": "The ferry costs 3 million; a grant pays two thirds.",
            "target": f"The ferry costs 3 million (request {i}).",
            "method": "geval",
        }
        for i in range(n)
    ]
    started = time.perf_counter()
    answers = asyncio.run(_post_all(server.url + "/check", bodies, headers, n, timeout_s))
    counts = Counter(status for status, _ in answers)
    return {
        "requests": n,
        "statuses": dict(sorted(counts.items())),
        "seconds": round(time.perf_counter() - started, 2),
        "refusals_without_retry_after": sum(1 for s, h in answers if s in (429, 503) and "retry-after" not in h),
        "errors": [h["error"] for s, h in answers if s == 0][:3],
    }


def distinct_options(
    server: Proc, token: str | None, n: int = 2000, concurrency: int = 16, timeout_s: float = 120.0
) -> dict[str, Any]:
    """``n`` /check requests each with its own options (geval ``max_tokens`` 1..n): memory and open files."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    before, fds_before = rss_mb(server.pid), open_fds(server.pid)  # ready: after start-up and its warm-up
    bodies = [
        {
            "source": "The ferry costs 3 million.",
            "target": "The ferry costs 3 million.",
            "method": "geval",
            "options": {"max_tokens": i + 1},
        }
        for i in range(n)
    ]
    started = time.perf_counter()
    answers = asyncio.run(_post_all(server.url + "/check", bodies[:1], headers, 1, timeout_s))
    first = rss_mb(server.pid)
    answers += asyncio.run(_post_all(server.url + "/check", bodies[1:], headers, concurrency, timeout_s))
    metrics = httpx.get(server.url + "/metrics", headers=headers, timeout=10).text
    cache_size = next(
        (float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("halluscope_method_cache_size ")),
        None,
    )
    return {
        "requests": n,
        "statuses": dict(Counter(s for s, _ in answers)),
        "seconds": round(time.perf_counter() - started, 2),
        "rss_before_mb": round(before, 1),
        "rss_after_mb": round(rss_mb(server.pid), 1),
        "rss_growth_mb": round(rss_mb(server.pid) - before, 1),
        "rss_after_first_request_mb": round(first, 1),
        "rss_growth_after_first_request_mb": round(rss_mb(server.pid) - first, 1),
        "peak_rss_mb": round(peak_rss_mb(server.pid), 1),
        "open_files_before": fds_before,
        "open_files_after": open_fds(server.pid),
        "method_cache_size": cache_size,
    }


def probe_judge_options(
    server: Proc, token: str | None, n: int = 2000, concurrency: int = 16, timeout_s: float = 300.0
) -> dict[str, Any]:
    """``n`` probe /check requests each naming its own judge model: each instance builds a judge client, and
    every evicted one must close it (open files and memory stay flat).

    Memory is read at three points besides the end: ``rss_before_mb`` when the server reports ready (after its
    start-up, which imports the built-in methods and their libraries: :mod:`halluscope.server.warmup`), after
    the first request alone (what one check adds: the HTTP client, the worker loops' threads), and after the
    first tenth (the method cache full, every worker thread started): growth is reported from each."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    before, fds_before = rss_mb(server.pid), open_fds(server.pid)
    bodies = [
        {
            "source": "The ferry costs 3 million.",
            "target": "The ferry costs 3 million.",
            "method": "probe",
            "options": {
                "judges": [f"judge-{i}"],
                "evidence_finder": "top_sentences",
                "retrieval": "always",
                "retriever": "bm25",
            },
        }
        for i in range(n)
    ]
    started = time.perf_counter()
    answers = asyncio.run(_post_all(server.url + "/check", bodies[:1], headers, 1, timeout_s))
    first_rss = rss_mb(server.pid)
    warm = max(2, n // 10)
    answers += asyncio.run(_post_all(server.url + "/check", bodies[1:warm], headers, concurrency, timeout_s))
    warm_rss, warm_fds = rss_mb(server.pid), open_fds(server.pid)
    answers += asyncio.run(_post_all(server.url + "/check", bodies[warm:], headers, concurrency, timeout_s))
    after = rss_mb(server.pid)
    return {
        "requests": n,
        "statuses": dict(Counter(s for s, _ in answers)),
        "seconds": round(time.perf_counter() - started, 2),
        "rss_before_mb": round(before, 1),
        "rss_after_mb": round(after, 1),
        "rss_growth_mb": round(after - before, 1),
        "rss_after_first_request_mb": round(first_rss, 1),
        "rss_growth_after_first_request_mb": round(after - first_rss, 1),
        "rss_after_first_tenth_mb": round(warm_rss, 1),
        "rss_growth_after_first_tenth_mb": round(after - warm_rss, 1),
        "open_files_after_first_tenth": warm_fds,
        "peak_rss_mb": round(peak_rss_mb(server.pid), 1),
        "open_files_before": fds_before,
        "open_files_after": open_fds(server.pid),
        "cache_sqlite_handles": _open_files_named(server.pid, "cache.sqlite"),
    }


def _open_files_named(pid: int, suffix: str) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").endswith(suffix)
        except OSError:
            continue
    return count


# --- scenario: /health while hostile replies are parsed ------------------------------------------------------


def health_under_hostile_replies(
    server: Proc,
    token: str | None,
    hostile: int = 4,
    rounds: int = 5,
    probe_every_s: float = 0.02,
    marker: bool = True,
    timeout_s: float = 300.0,
) -> dict[str, Any]:
    """``rounds`` times ``hostile`` concurrent geval checks whose every reply is 196 KB of ``<think>`` (see the
    stub; ``marker=False``: ordinary replies, the control), while /health is polled on one kept-alive
    connection: its latency percentiles."""
    from tests.stub_server import HOSTILE_MARKER

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    tag = HOSTILE_MARKER if marker else "ordinary"
    done: list[tuple[int, dict[str, str]]] = []
    statuses: Counter[int] = Counter()

    def run() -> None:
        for r in range(rounds):
            bodies = [
                {
                    "source": f"{tag} The ferry costs 3 million.",
                    "method": "geval",
                    "target": f"The ferry costs {i} million (round {r}).",
                }
                for i in range(hostile)
            ]
            done.extend(asyncio.run(_post_all(server.url + "/check", bodies, headers, hostile, timeout_s)))

    import threading

    with httpx.Client(base_url=server.url, timeout=60) as client:
        idle = []
        for _ in range(20):
            t = time.perf_counter()
            client.get("/health")
            idle.append(1000 * (time.perf_counter() - t))
        worker = threading.Thread(target=run)
        started = time.perf_counter()
        worker.start()
        waits: list[float] = []
        while worker.is_alive():
            t = time.perf_counter()
            client.get("/health")
            waits.append(1000 * (time.perf_counter() - t))
            time.sleep(probe_every_s)
        worker.join()
        seconds = time.perf_counter() - started
    statuses.update(s for s, _ in done)
    waits.sort()
    idle.sort()

    def pct(values: list[float], q: float) -> float | None:
        return round(values[min(len(values) - 1, int(q * len(values)))], 1) if values else None

    return {
        "concurrent_checks": hostile,
        "rounds": rounds,
        "reply": "196,000 characters of <think>" if marker else "an ordinary rating",
        "statuses": dict(statuses),
        "checks_seconds": round(seconds, 2),
        "health_probes": len(waits),
        "health_idle_p50_ms": pct(idle, 0.5),
        "health_p50_ms": pct(waits, 0.5),
        "health_p99_ms": pct(waits, 0.99),
        "health_max_ms": pct(waits, 1.0),
    }


# --- scenario: slow senders ----------------------------------------------------------------------------------


def slow_senders(server: Proc, token: str | None, slow: int = 4, bytes_per_s: float = 1.0) -> dict[str, Any]:
    """``slow`` clients send a /check body at ``bytes_per_s`` while a fast client checks a pair: the fast
    one's status and time, then what the slow ones got (408 once the body timeout passes)."""
    import threading

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = json.dumps(
        {"source": "The ferry costs 3 million.", "target": "The ferry costs 3 million.", "method": "geval"}
    ).encode()
    results: list[dict[str, Any]] = []

    def one_slow() -> None:
        sock = socket.create_connection((HOST, server.port), timeout=120)
        head = (
            f"POST /check HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        )
        started = time.perf_counter()
        sock.sendall(head.encode())
        sock.setblocking(False)
        answer, sent = b"", 0
        try:
            while b"\r\n\r\n" not in answer and time.perf_counter() - started < 120:
                readable, _, _ = select.select([sock], [], [], 1.0 / bytes_per_s)
                if readable:
                    data = sock.recv(65536)
                    if not data:
                        break
                    answer += data
                elif sent < len(body):
                    try:
                        sent += sock.send(body[sent : sent + 1])
                    except OSError:
                        break
        finally:
            sock.close()
        line = answer.split(b"\r\n", 1)[0].decode("latin-1")
        results.append(
            {
                "status": int(line.split()[1]) if line.startswith("HTTP/") else 0,
                "bytes_sent": sent,
                "seconds": round(time.perf_counter() - started, 1),
            }
        )

    threads = [threading.Thread(target=one_slow) for _ in range(slow)]
    for t in threads:
        t.start()
    time.sleep(2.0)  # the slow clients are connected and trickling
    started = time.perf_counter()
    fast = httpx.post(
        server.url + "/check", content=body, headers={**headers, "Content-Type": "application/json"}, timeout=120
    )
    fast_seconds = time.perf_counter() - started
    for t in threads:
        t.join()
    return {
        "slow_clients": slow,
        "bytes_per_s": bytes_per_s,
        "fast_status": fast.status_code,
        "fast_seconds": round(fast_seconds, 2),
        "slow_statuses": dict(Counter(r["status"] for r in results)),
        "slow_seconds_max": max(r["seconds"] for r in results) if results else None,
    }
