"""Local engine vs Ray engine on a latency-injected OpenAI-compatible endpoint, and the fault tests.

    python benchmarks/ray_throughput.py [--items 400] [--latency-ms 100] [--concurrency 16] [--actors 2,4]
                                        [--skip-fault] [--out FILE]

Everything runs on this machine and talks only to 127.0.0.1: a stub endpoint in its own process (uvicorn;
it sleeps ``latency`` per request, answers a geval rating, and records a hash of every request body on
arrival and once answered), a local Ray instance (``ray.init``, bound to loopback) and, when the Debian
package ``redis-server`` is installed, a Redis server on a free loopback port.

1. Throughput: ``geval`` (one LLM call per item) over N generic-JSONL items through ``run_bench``, the local
   engine at concurrency C vs the Ray engine with A actors x C/A each (equal total concurrency), cache
   off. Reported: wall time of the run (Ray: including actor start-up), the steady rate from the first
   finished item to the last, and efficiency = ideal time (N x latency / C) / wall time.
2. Kill and resume: ``halluscope bench --engine ray`` in a child process is killed with SIGKILL once a
   quarter of the items are in items.jsonl, then a second child resumes the same folder. Reported: items
   lost (missing from items.jsonl), items written twice, requests sent again although their reply had
   reached halluscope (it is in the cache: the guarantee is 0), and requests in flight when the actors died
   (the endpoint may have answered them, but no process was left to receive the reply), which are redone.
   Each stub reply names its request, so the cache tells which requests' replies were received.
3. Shared cache: a child runs the bench with ``HALLUSCOPE_CACHE_URL=redis://...`` (Ray engine); another
   child, with another output folder and no local cache in common, re-runs it (local engine). Reported:
   requests reaching the endpoint during the re-run (the guarantee: 0) and whether the metrics match.

Ray start-up (~6-15 s on 2 loaded cores) and actor start-up (~5 s a run) are one-off costs; on one machine
Ray cannot beat the local engine on I/O-bound work (one asyncio loop already keeps C requests in flight);
its point is many machines (see docs/scaling.md). The 1-minute load average is recorded with the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's tests/ helpers
from tests.stub_server import answer_lifespan, chat_completion, read_body, send_json  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TAG = re.compile(r"request ([0-9a-f]{16})")


# --- the endpoint (its own process) ---------------------------------------------------------------------


class StubEndpoint:
    """ASGI app: ``POST .../chat/completions`` sleeps ``latency_s``, then answers a geval rating (5 for an odd
    ``Claim number N.``, 2 for an even one) whose reason names the request (``request <hash>``).
    ``GET /log`` returns the request hashes in arrival order and those answered; ``/health`` answers at once."""

    def __init__(self, latency_s: float):
        self.latency_s = latency_s
        self.arrived: list[str] = []
        self.answered: list[str] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        body, whole = await read_body(receive)
        if not whole:  # a client killed mid-request
            return
        if scope["path"].endswith("/chat/completions"):
            digest = hashlib.sha256(body).hexdigest()[:16]
            self.arrived.append(digest)
            request = json.loads(body)
            await asyncio.sleep(self.latency_s)
            text = " ".join(m["content"] for m in request["messages"] if m["role"] == "user")
            found = re.search(r"Claim number (\d+)\.", text)
            score = 5 if found and int(found.group(1)) % 2 else 2
            content = json.dumps({"reason": f"request {digest}", "score": score})
            await send_json(
                send, 200, chat_completion(digest, request.get("model", "stub"), content, len(text.split()), 8)
            )
            self.answered.append(digest)
        elif scope["path"] == "/log":
            await send_json(send, 200, {"arrived": self.arrived, "answered": self.answered})
        else:
            await send_json(send, 200, {"ok": True})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EndpointProcess:
    def __init__(self, latency_ms: float):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.latency_ms = latency_ms

    def __enter__(self) -> EndpointProcess:
        import httpx

        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", "--port", str(self.port), "--latency-ms", str(self.latency_ms)]
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).raise_for_status()
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        self.__exit__()
        raise RuntimeError("endpoint not ready")

    def log(self) -> dict[str, list[str]]:
        import httpx

        return httpx.get(f"http://127.0.0.1:{self.port}/log", timeout=30).json()

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class RedisProcess:
    """``redis-server`` on a free loopback port, no persistence; ``url`` is None when it is not installed."""

    def __enter__(self) -> RedisProcess:
        self.url = None
        binary = shutil.which("redis-server")
        if binary is None:
            return self
        port = free_port()
        self.dir = tempfile.mkdtemp(prefix="redis-")
        self.proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        for _ in range(200):
            try:
                redis.Redis(port=port, host="127.0.0.1").ping()
                self.url = f"redis://127.0.0.1:{port}/0"
                return self
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def __exit__(self, *exc) -> None:
        if self.url:
            self.proc.terminate()
            self.proc.wait(timeout=10)


# --- helpers --------------------------------------------------------------------------------------------


def write_items(path: Path, n: int) -> Path:
    """N generic-format items; the file name goes into every source, so each phase sends its own requests."""
    from halluscope.records import Example

    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            ex = Example(
                id=f"ex{i}",
                source=f"Source {path.stem}-{i}: the council approved the ferry line by 7 to 2.",
                target=f"Claim number {i}.",
                label=i % 2,
                split="evaluation" if i < n // 2 else "test",
            )
            fh.write(ex.model_dump_json() + "\n")
    return path


def item_lines(path: Path) -> list[str]:
    ids = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                ids.append(json.loads(line)["example_id"])
            except (json.JSONDecodeError, KeyError):
                pass  # a line cut by the kill: dropped (and redone) on resume
    return ids


def cached_request_tags(path: Path) -> set[str]:
    """The request hashes whose replies are in the SQLite cache (the stub writes it into each reply)."""
    import sqlite3

    with sqlite3.connect(path) as db:
        texts = [json.loads(row[0])["text"] for row in db.execute("SELECT completion FROM responses")]
    return {m.group(1) for t in texts if (m := TAG.search(t))}


def cli(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "halluscope.cli.main", "bench", *args]


# --- 1. throughput --------------------------------------------------------------------------------------


async def timed_run(method, dataset, out: Path, concurrency: int, engine) -> dict[str, float]:
    from halluscope.bench import runner

    finished: list[float] = []
    original = runner.ItemStore.write

    def write(fh, example_id, report):  # time each finished item as it is written
        finished.append(time.perf_counter())
        original(fh, example_id, report)

    runner.ItemStore.write = staticmethod(write)
    try:
        started = time.perf_counter()
        await runner.run_bench(
            method, dataset, out, concurrency=concurrency, progress=False, n_bootstrap=0, suite_names=[], engine=engine
        )
        wall = time.perf_counter() - started
    finally:
        runner.ItemStore.write = staticmethod(original)
    steady = (len(finished) - 1) / (finished[-1] - finished[0]) if len(finished) > 1 else float("nan")
    return {"wall_s": wall, "first_item_s": finished[0] - started, "steady_items_per_s": steady}


def throughput(args: argparse.Namespace, endpoint: EndpointProcess, tmp: Path) -> list[dict[str, Any]]:
    from halluscope.bench.datasets import load_dataset
    from halluscope.bench.ray_engine import RayEngine
    from halluscope.config import Config
    from halluscope.methods import get_method

    data = load_dataset(str(write_items(tmp / "throughput.jsonl", args.items)))
    ideal = args.items * args.latency_ms / 1000 / args.concurrency
    config = Config(
        model="stub", base_url=endpoint.base_url, cache=False, max_concurrency=args.concurrency, max_tokens=256
    )
    rows = []
    setups: list[tuple[str, Any]] = [("local", None)]
    for actors in args.actors:
        per_actor = max(1, args.concurrency // actors)
        setups.append(
            (
                f"ray {actors}x{per_actor}",
                RayEngine(actors=actors, actor_concurrency=per_actor, cpus_per_actor=2 / actors),
            )
        )
    for round_ in range(args.rounds):
        for name, engine in setups:
            result = asyncio.run(
                timed_run(
                    get_method("geval", config=config), data, tmp / f"tp-{name}-{round_}", args.concurrency, engine
                )
            )
            rows.append(
                {
                    "engine": name,
                    "round": round_,
                    **result,
                    "ideal_s": ideal,
                    "efficiency": ideal / result["wall_s"],
                    "steady_efficiency": result["steady_items_per_s"] * ideal / args.items,
                }
            )
            print(
                f"  {name:>10} round {round_}: {result['wall_s']:.2f} s wall, first item after "
                f"{result['first_item_s']:.2f} s, steady {result['steady_items_per_s']:.1f} items/s",
                flush=True,
            )
    return rows


# --- 2. kill and resume ---------------------------------------------------------------------------------


def kill_and_resume(args: argparse.Namespace, endpoint: EndpointProcess, tmp: Path, address: str) -> dict[str, Any]:
    n = args.fault_items
    data = write_items(tmp / "fault.jsonl", n)
    out = tmp / "fault-run"
    env = {**os.environ, "HALLUSCOPE_CACHE_PATH": str(tmp / "fault-cache.sqlite"), "XDG_CACHE_HOME": str(tmp / "xdg")}
    common = [
        "--dataset",
        str(data),
        "--method",
        "geval",
        "--model",
        "stub",
        "--base-url",
        endpoint.base_url,
        "--out",
        str(out),
        "--engine",
        "ray",
        "--address",
        address,
        "--actors",
        "2",
        "--actor-concurrency",
        str(max(1, args.concurrency // 2)),
        "--actor-cpus",
        "0.5",
        "--bootstrap",
        "0",
        "--no-progress",
    ]
    items = out / "items.jsonl"
    base = endpoint.log()
    started = time.perf_counter()
    driver = subprocess.Popen(cli(common), env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while len(item_lines(items)) < n // 4:
        if driver.poll() is not None:
            raise RuntimeError("the first run ended before the kill")
        time.sleep(0.01)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    killed_at = time.perf_counter() - started
    lines_at_kill = len(item_lines(items))
    arrived_at_kill = len(endpoint.log()["arrived"]) - len(base["arrived"])
    quiet, seen = time.monotonic(), None
    while time.monotonic() - quiet < 1.0:  # Ray stops the dead driver's actors
        count = len(endpoint.log()["arrived"])
        if count != seen:
            quiet, seen = time.monotonic(), count
        time.sleep(0.1)
    before = {k: v[len(base[k]) :] for k, v in endpoint.log().items()}  # this phase's requests only
    cached = cached_request_tags(tmp / "fault-cache.sqlite")  # replies that reached an actor (and its cache)
    started = time.perf_counter()
    resumed = subprocess.run(cli(common), env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    resume_s = time.perf_counter() - started
    if resumed.returncode != 0:
        raise RuntimeError(f"resume failed: {resumed.stderr[-2000:]}")
    after = {k: v[len(base[k]) :] for k, v in endpoint.log().items()}
    resent = set(after["arrived"][len(before["arrived"]) :])
    ids = item_lines(items)
    arrived_before = set(before["arrived"])
    results = json.loads((out / "results.json").read_text())
    return {
        "items": n,
        "killed_after_s": killed_at,
        "items_in_file_at_kill": lines_at_kill,
        "requests_at_kill": arrived_at_kill,
        "requests_after_kill_from_dying_actors": len(before["arrived"]) - arrived_at_kill,
        "requests_before_resume": len(before["arrived"]),
        "replies_cached_before_resume": len(cached),
        "requests_during_resume": len(after["arrived"]) - len(before["arrived"]),
        "resume_wall_s": resume_s,
        "items_lost": len({f"ex{i}" for i in range(n)} - set(ids)),
        "items_written_twice": len(ids) - len(set(ids)),
        "repeated_calls_reply_had_reached_halluscope": len(cached & resent),
        "redone_in_flight_at_kill_reply_never_received": len((arrived_before - cached) & resent),
        "requests_total": len(after["arrived"]),
        "distinct_requests": len(set(after["arrived"])),
        "n_unscored": results["n_unscored"],
        "auc": results["metrics"]["binary"]["auc"]["value"],
    }


# --- 3. a shared Redis cache ----------------------------------------------------------------------------


def redis_rerun(
    args: argparse.Namespace, endpoint: EndpointProcess, tmp: Path, address: str, redis_url: str | None
) -> dict[str, Any]:
    if redis_url is None:
        return {"skipped": "redis-server not installed (Debian package redis-server)"}
    n = args.fault_items
    data = write_items(tmp / "redis.jsonl", n)
    runs = {}
    for name, engine in (
        ("first", ["--engine", "ray", "--address", address, "--actors", "2", "--actor-cpus", "0.5"]),
        ("rerun", ["--engine", "local"]),
    ):
        env = {**os.environ, "HALLUSCOPE_CACHE_URL": redis_url, "XDG_CACHE_HOME": str(tmp / f"xdg-{name}")}
        before = len(endpoint.log()["arrived"])
        started = time.perf_counter()
        done = subprocess.run(
            cli(
                [
                    "--dataset",
                    str(data),
                    "--method",
                    "geval",
                    "--model",
                    "stub",
                    "--base-url",
                    endpoint.base_url,
                    "--out",
                    str(tmp / f"redis-{name}"),
                    "--bootstrap",
                    "0",
                    "--no-progress",
                    "--concurrency",
                    str(args.concurrency),
                    *engine,
                ]
            ),
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{name} failed: {done.stderr[-2000:]}")
        results = json.loads((tmp / f"redis-{name}" / "results.json").read_text())
        runs[name] = {
            "requests_at_endpoint": len(endpoint.log()["arrived"]) - before,
            "wall_s": time.perf_counter() - started,
            "calls": results["usage"]["calls"],
            "cache_hits": results["usage"]["cache_hits"],
            "metrics": results["metrics"],
        }
    same = runs["first"].pop("metrics") == runs["rerun"].pop("metrics")
    return {"items": n, **runs, "same_metrics": same}


# --- main -----------------------------------------------------------------------------------------------


def print_tables(result: dict[str, Any]) -> None:
    s = result["setup"]
    print(
        f"\n## Throughput: {s['items']} items x 1 call, {s['latency_ms']:g} ms per call, total concurrency "
        f"{s['concurrency']} (load avg {s['loadavg_1m']} on {s['cpus']} CPUs; Ray {s['ray']})\n"
    )
    print("| engine | wall s (median) | items/s | first item s | steady items/s | efficiency (ideal/wall) |")
    print("|---|---|---|---|---|---|")
    by_engine: dict[str, list[dict]] = {}
    for row in result["throughput"]:
        by_engine.setdefault(row["engine"], []).append(row)
    for name, rows in by_engine.items():
        rows.sort(key=lambda r: r["wall_s"])
        mid = rows[len(rows) // 2]
        print(
            f"| {name} | {mid['wall_s']:.2f} | {s['items'] / mid['wall_s']:.1f} | {mid['first_item_s']:.2f} | "
            f"{mid['steady_items_per_s']:.1f} | {mid['efficiency']:.2f} |"
        )
    ideal_rate = s["concurrency"] / s["latency_ms"] * 1000 if s["latency_ms"] else float("inf")
    print(f"\nideal: {result['throughput'][0]['ideal_s']:.2f} s = {ideal_rate:.0f} items/s")
    for key in ("kill_resume", "redis_rerun"):
        if key in result:
            print(f"\n## {key}\n")
            for k, v in result[key].items():
                print(f"- {k}: {v}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=600)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--actors", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fault-items", type=int, default=200)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-fault", action="store_true")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        import uvicorn

        uvicorn.run(
            StubEndpoint(args.latency_ms / 1000),
            host="127.0.0.1",
            port=args.port,
            log_level="warning",
            access_log=False,
            lifespan="on",
        )
        return

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # the local Ray instance on 127.0.0.1
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    started = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    ray_start_s = time.perf_counter() - started
    address = ray.get_runtime_context().gcs_address
    result: dict[str, Any] = {
        "setup": {
            "items": args.items,
            "latency_ms": args.latency_ms,
            "concurrency": args.concurrency,
            "actors": args.actors,
            "rounds": args.rounds,
            "cpus": os.cpu_count(),
            "loadavg_1m": round(os.getloadavg()[0], 2),
            "ray": ray.__version__,
            "ray_init_s": round(ray_start_s, 2),
        }
    }
    with (
        tempfile.TemporaryDirectory() as tmp_name,
        EndpointProcess(args.latency_ms) as endpoint,
        RedisProcess() as redis_server,
    ):
        tmp = Path(tmp_name)
        if not args.skip_throughput:
            print("throughput:", flush=True)
            result["throughput"] = throughput(args, endpoint, tmp)
        if not args.skip_fault:
            print("kill and resume...", flush=True)
            result["kill_resume"] = kill_and_resume(args, endpoint, tmp, address)
            print("shared Redis cache...", flush=True)
            result["redis_rerun"] = redis_rerun(args, endpoint, tmp, address, redis_server.url)
    ray.shutdown()
    if "throughput" in result:
        print_tables(result)
    else:
        for key in ("kill_resume", "redis_rerun"):
            print(key, json.dumps(result.get(key), indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
