"""A gzip bomb from a loopback OpenAI-compatible endpoint: the bytes on the wire, what the backend read, and the
process's peak resident memory.

    python benchmarks/gzip_bomb.py [--inflated-mb 64]

The endpoint (``tests/test_gzip_reply.py``'s stub) answers with ``Content-Encoding: gzip`` whatever the request
asks for; the body inflates to ``--inflated-mb`` MB of JSON."""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tests.test_gzip_reply as stub  # noqa: E402
from halluscope.llm import GenerateParams, LLMError  # noqa: E402
from tests.test_backends_openai import MSGS, backend  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inflated-mb", type=int, default=64)
    args = parser.parse_args()
    stub.BOMB_BYTES = args.inflated_mb * 2**20
    bomb = stub._bomb()
    server = stub._CompressedBody(bomb, "gzip")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    try:
        asyncio.run(backend(server.url, max_retries=0).generate(MSGS, GenerateParams()))
        outcome = "read"
    except LLMError as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    finally:
        server.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"wire {len(bomb) / 1024:.0f} KB, inflates to {args.inflated_mb} MB; {time.perf_counter() - started:.2f} s; "
        f"peak RSS {before / 1024:.0f} -> {peak / 1024:.0f} MB; {outcome}"
    )


if __name__ == "__main__":
    main()
