"""Job throughput of one `halluscope serve` replica vs two sharing their jobs through Redis (``--jobs-url``).

Starts ``redis-server`` on a free loopback port, the stub OpenAI-compatible endpoint (``halluscope.server.stub``,
a fixed latency per request) and, for each replica count, that many servers pointing at the same Redis. A
geval job (one LLM request per item) is submitted to the first replica; the time from submission to the job's
``done`` is measured (server start-up excluded). Each run uses new item texts, so no reply comes from a cache.

    python benchmarks/replica_throughput.py --items 400 --latency-ms 200 --concurrency 4
    python benchmarks/replica_throughput.py --items 600 --latency-ms 0 --concurrency 8   # CPU-bound

Needs the server and redis extras and ``redis-server`` on PATH. Linux (the loadtest helpers read /proc).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's tests/ helpers
from tests.loadtest import free_port, start_server, start_stub  # noqa: E402


def start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    server = shutil.which("redis-server")
    if server is None:
        sys.exit("redis-server is not on PATH (Debian: apt-get install redis-server)")
    port = free_port()
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 30
    while True:
        try:
            redis.Redis.from_url(url, socket_connect_timeout=0.5).ping()
            return proc, url
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                proc.kill()
                sys.exit("redis-server did not start")
            time.sleep(0.05)


def run(
    home: Path, redis_url: str, replicas: int, items: int, latency_ms: float, concurrency: int, lease_s: float
) -> dict[str, object]:
    tag = uuid.uuid4().hex[:8]
    prefix = f"bench:{tag}:"
    args = (
        "--jobs-url",
        f"{redis_url}?prefix={prefix}jobs:",
        "--job-lease",
        str(lease_s),
        "--job-concurrency",
        str(concurrency),
    )
    env = {"HALLUSCOPE_CACHE_URL": f"{redis_url}?prefix={prefix}llm:"}
    with ExitStack() as stack:
        stub = stack.enter_context(start_stub(home / f"stub-{tag}", latency_ms=latency_ms))
        servers = [
            stack.enter_context(start_server(home / f"r{i}-{tag}", *args, stub=stub, env=env)) for i in range(replicas)
        ]
        pairs = [
            {
                "id": f"i{i}",
                "source": "The ferry costs 3 million; a grant pays two thirds.",
                "target": f"Run {tag}: the ferry costs {i + 1} million.",
            }
            for i in range(items)
        ]
        started = time.perf_counter()
        job = httpx.post(servers[0].url + "/jobs", json={"method": "geval", "items": pairs}, timeout=120).json()
        while (info := httpx.get(f"{servers[0].url}/jobs/{job['id']}", timeout=60).json())["status"] not in (
            "done",
            "failed",
        ):
            time.sleep(0.05)
        wall = time.perf_counter() - started
        per_replica = []
        for server in servers:
            text = httpx.get(server.url + "/metrics", timeout=60).text
            done = [
                float(line.split()[-1])
                for line in text.splitlines()
                if line.startswith('halluscope_job_queue_items_total{event="done"}')
            ]
            per_replica.append(int(done[0]) if done else 0)
        stats = httpx.get(stub.url + "/stats", timeout=30).json()
    return {
        "replicas": replicas,
        "items": items,
        "latency_ms": latency_ms,
        "concurrency_per_replica": concurrency,
        "status": info["status"],
        "done": info["done"],
        "wall_s": round(wall, 2),
        "items_per_s": round(items / wall, 1),
        "items_done_by_replica": per_replica,
        "llm_requests": stats["received"],
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--concurrency", type=int, default=4, help="--job-concurrency of each replica")
    parser.add_argument("--replicas", default="1,2")
    parser.add_argument("--lease-s", type=float, default=30.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="halluscope-replicas-") as tmp:
        home = Path(tmp)
        redis_proc, url = start_redis(home)
        try:
            rows = [
                run(home, url, int(n), args.items, args.latency_ms, args.concurrency, args.lease_s)
                for n in args.replicas.split(",")
            ]
        finally:
            redis_proc.terminate()
            redis_proc.wait(10)
    for row in rows:
        print(json.dumps(row))
    if len(rows) >= 2:
        ratio = rows[-1]["items_per_s"] / rows[0]["items_per_s"]  # type: ignore[operator]
        print(f"throughput ratio {rows[-1]['replicas']} vs {rows[0]['replicas']} replicas: {ratio:.2f}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
