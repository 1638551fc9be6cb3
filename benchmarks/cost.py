"""The quality-and-cost table of every halluscope method (with and without ``batch_size``, and each cascade) beside
RAGAS and DeepEval faithfulness, on one dataset and one local endpoint: a thin wrapper over
``halluscope bench --methods ... --peers ragas,deepeval`` that starts the endpoint.

    python benchmarks/cost.py [--dataset qags:dev] [--limit 20 | --sample 10] [--base-url URL --model NAME
                              --api-key KEY] [--max-tokens 128] [--methods geval,dcr,...] [--batch-size 4]
                              [--no-peers] [--out bench_out/cost]

Without ``--base-url`` it starts ``python -m llama_cpp.server`` on loopback with an embedded GGUF (``--embedded-model``
smollm2 or qwen2.5-coder-1.5b; the ``embedded`` extra), or with ``--server-decoding embedded`` through
``lazy_llama_server.py`` (decoded like halluscope's embedded backend). The cache is off and calls go one at a time.
Everything else -- the items (the same for every system), resume (one sub-folder per system in ``--out``), the
statistic with its 95 % bootstrap CI, coverage, calls, tokens and seconds per item -- is ``halluscope bench``'s
(``docs/benchmarks.md``, "Regenerating the quality table"). ``--methods`` picks systems of the plan below by label
(``"dcr batch_size=4"``) or by method (every variant of it); ``--print-command`` prints the ``halluscope bench``
command line and runs nothing.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
SERVER_KEY = "sk-loopback-cost"
ALIAS = "smollm2-server"
PEERS = "ragas,deepeval"


def method_plan(batch_size: int) -> list[tuple[str, str]]:
    """(label, ``--methods`` entry): the no-LLM baselines, then each method with the paper's defaults, batched,
    and as a cascade behind the lexical gate."""
    plan = [("rouge", "rouge"), ("gate", "gate"), ("geval", "geval")]
    for method in ("dcr", "factscore", "probe", "dove"):
        plan += [
            (method, method),
            (f"{method} batch_size={batch_size}", f"{method}+batch_size={batch_size}"),
            (f"{method} gate=lexical", f"{method}+gate=lexical"),
        ]
    return plan + [("localize", "localize")]


# ------------------------------------------------------------------------------------------------ the endpoint


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_llama_server(
    n_ctx: int,
    threads: int,
    ready_timeout_s: float = 180.0,
    *,
    embedded_model: str = "smollm2",
    alias: str = ALIAS,
    decoding: str = "server",
) -> tuple[subprocess.Popen, str]:
    """``python -m llama_cpp.server`` with an embedded GGUF (SmolLM2 by default) on a free loopback port; with
    ``decoding="embedded"`` through ``lazy_llama_server.py`` (decoded like the embedded backend)."""
    from halluscope.llm.embedded import resolve_gguf

    port = _free_port()
    server = (
        ["-m", "llama_cpp.server"] if decoding == "server" else [str(Path(__file__).with_name("lazy_llama_server.py"))]
    )
    cmd = [
        sys.executable,
        *server,
        "--model",
        str(resolve_gguf(embedded_model)),
        "--model_alias",
        alias,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(threads),
        "--api_key",
        SERVER_KEY,
        "--verbose",
        "False",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + ready_timeout_s
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"llama_cpp.server exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
        try:
            if (
                httpx.get(f"{url}/models", headers={"Authorization": f"Bearer {SERVER_KEY}"}, timeout=2).status_code
                == 200
            ):
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


def bench_command(args: argparse.Namespace, base_url: str) -> list[str]:
    """The ``halluscope bench`` command line of this run."""
    plan = method_plan(args.batch_size)
    if args.methods:
        wanted = {m.strip() for m in args.methods.split(",")}
        labels = {label for label, _ in plan}
        # a label names that system alone; a bare method name every variant of it
        plan = [
            (label, entry)
            for label, entry in plan
            if label in wanted or (entry.split("+")[0] in wanted and entry.split("+")[0] not in labels)
        ]
    cmd = [
        sys.executable,
        "-m",
        "halluscope",
        "bench",
        "--dataset",
        args.dataset,
        "--methods",
        ",".join(entry for _, entry in plan) or "none",
        "--model",
        args.model,
        "--base-url",
        base_url,
        "--api-key",
        args.api_key,
        "--no-cache",
        "--concurrency",
        "1",
        "-O",
        str(args.out),
        "--no-progress",
    ]
    cmd += ["--limit", str(args.limit)] if args.limit else []
    cmd += ["--sample", str(args.sample)] if args.sample else []
    cmd += ["--data-dir", args.data_dir] if args.data_dir else []
    cmd += ["--judge-model", args.judge_model] if args.judge_model else []
    cmd += ["--judge-base-url", args.judge_base_url] if args.judge_base_url else []
    cmd += [] if args.no_peers else ["--peers", PEERS]
    return cmd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dataset",
        default="qags:dev",
        help="qags:dev, summedits[:domain], final:dev or a generic-format .jsonl (default qags:dev)",
    )
    parser.add_argument("--data-dir", default=None, help="the shared data folder (default: HALLUSCOPE_DATA_DIR)")
    parser.add_argument("--limit", type=int, default=None, help="the first N items (after --sample)")
    parser.add_argument("--sample", type=int, default=None, help="a seeded sample of N items per split and domain")
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint (default: start llama_cpp.server)")
    parser.add_argument(
        "--model",
        default=None,
        help="model name at --base-url (default: the alias of the llama_cpp.server started here, e.g. smollm2-server)",
    )
    parser.add_argument("--api-key", default=SERVER_KEY)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--n-ctx", type=int, default=8192, help="context of the llama_cpp.server started here")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads of the server started here")
    parser.add_argument(
        "--embedded-model",
        default="smollm2",
        help="GGUF of the llama_cpp.server started here: smollm2 or qwen2.5-coder-1.5b",
    )
    parser.add_argument(
        "--server-decoding",
        default="server",
        choices=["server", "embedded"],
        help="how the llama_cpp.server started here decodes: 'server' (its own defaults) or "
        "'embedded' (as halluscope's embedded backend: repeat_penalty 1.0, lazy grammar sampler)",
    )
    parser.add_argument(
        "--structured-output",
        default="auto",
        choices=["auto", "schema", "json_object", "plain"],
        help="how halluscope asks for structured replies (Config.structured_output)",
    )
    parser.add_argument("--judge-model", default=None, help="FINAL matching judge (default: the evaluated model)")
    parser.add_argument("--judge-base-url", default=None, help="OpenAI-compatible endpoint of --judge-model")
    parser.add_argument("--batch-size", type=int, default=4, help="batch_size of the batched variants")
    parser.add_argument(
        "--methods", help="comma-separated labels or method names to run (default: all); 'none' for the peers alone"
    )
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--out", type=Path, default=REPO / "bench_out" / "cost")
    parser.add_argument("--print-command", action="store_true", help="print the halluscope bench command, run nothing")
    args = parser.parse_args(argv)
    if args.model is None:
        args.model = ALIAS if args.embedded_model == "smollm2" else f"{args.embedded_model}-server"
    env = {
        **os.environ,
        "HALLUSCOPE_MAX_TOKENS": str(args.max_tokens),
        "HALLUSCOPE_STRUCTURED_OUTPUT": args.structured_output,
        "HALLUSCOPE_TIMEOUT_S": "900",
        "HALLUSCOPE_MAX_RETRIES": "0",
    }
    if args.print_command:
        print(" ".join(bench_command(args, args.base_url or "<llama_cpp.server>")))
        return 0
    proc = None
    if args.base_url:
        base_url = args.base_url
    else:
        proc, base_url = start_llama_server(
            args.n_ctx,
            args.threads,
            embedded_model=args.embedded_model,
            alias=args.model,
            decoding=args.server_decoding,
        )
    try:
        return subprocess.run(bench_command(args, base_url), env=env).returncode
    finally:
        if proc is not None:
            stop(proc)


if __name__ == "__main__":
    sys.exit(main())
