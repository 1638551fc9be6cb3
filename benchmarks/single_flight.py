"""Single flight: identical requests in flight at the same moment share one LLM call.

Starts the stub OpenAI-compatible endpoint (``python -m halluscope.server.stub``) on 127.0.0.1 with a fixed
latency in a subprocess, then sends ``--copies`` identical requests at once for each of ``--prompts``
distinct prompts through one ``halluscope.llm.LLM`` (with a fresh SQLite cache, and with the cache off), and
reads from the endpoint how many requests reached it. Then the same burst again with the cache on (all hits).
Also: ``check_many`` of one pair repeated ``--copies`` times with ``geval`` (one call expected).

    python benchmarks/single_flight.py [--prompts 20] [--copies 10] [--latency-ms 200] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stats(url: str) -> dict:
    return httpx.get(f"{url}/stats", timeout=5).json()


async def _burst(llm, prompts: int, copies: int) -> tuple[int, float]:
    messages = [[{"role": "user", "content": f"Rate pair {i}."}] for i in range(prompts)]
    started = time.perf_counter()
    results = await asyncio.gather(*(llm.generate(m) for m in messages for _ in range(copies)))
    return len(results), time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    from halluscope import Config
    from halluscope.llm import get_llm

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "halluscope.server.stub", "--port", str(port),
                             "--latency-ms", str(args.latency_ms)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rows = []
    try:
        for _ in range(100):
            try:
                _stats(url)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            raise SystemExit(f"stub endpoint did not start: {proc.stderr.read().decode()[-500:]}")
        with tempfile.TemporaryDirectory() as tmp:
            base = dict(model="stub", base_url=f"{url}/v1", max_concurrency=args.prompts * args.copies)
            for label, config in [
                ("cache off", Config(**base, cache=False)),
                ("fresh SQLite cache", Config(**base, cache=True, cache_path=Path(tmp) / "c.sqlite")),
                ("same cache again", Config(**base, cache=True, cache_path=Path(tmp) / "c.sqlite")),
            ]:
                before = _stats(url)["received"]
                llm = get_llm(config)
                sent, wall = asyncio.run(_burst(llm, args.prompts, args.copies))
                reached = _stats(url)["received"] - before
                rows.append({"run": label, "requests made": sent, "reached endpoint": reached,
                             "calls": llm.usage.calls, "cache hits": llm.usage.cache_hits, "wall s": round(wall, 2)})
            import halluscope

            config = Config(**base, cache=False)
            before = _stats(url)["received"]
            reports = halluscope.check_many([("The museum opened in 1990.", "It opened in 1990.")] * args.copies,
                                            method="geval", config=config)
            rows.append({"run": f"geval check_many, one pair x{args.copies}, cache off",
                         "requests made": len(reports), "reached endpoint": _stats(url)["received"] - before,
                         "calls": sum(r.usage.calls for r in reports), "cache hits": None, "wall s": None})
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    cols = list(rows[0])
    print(f"{args.prompts} distinct prompts x {args.copies} identical copies at once, endpoint latency "
          f"{args.latency_ms:.0f} ms\n")
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join("" if row[c] is None else str(row[c]) for c in cols) + " |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
