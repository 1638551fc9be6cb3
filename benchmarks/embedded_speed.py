"""Measure the embedded model on this machine: import + load time, prompt processing and generation speed.

    python benchmarks/embedded_speed.py [--model smollm2|PATH.gguf] [--prompt-tokens 500] [--gen-tokens 128]

Prints one JSON object. Numbers depend on what else the CPU is doing; the 1-minute load average is
recorded next to them.
"""

from __future__ import annotations

import argparse
import json
import os
import time

STORY = (
    "The city council met on Tuesday to discuss the new budget for public transport. "
    "Officials said ticket prices would stay the same, while two bus lines would be extended to the airport. "
    "Residents asked about night services, and the mayor promised a report by the end of the month. "
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="embedded model name or .gguf path")
    parser.add_argument("--prompt-tokens", type=int, default=500)
    parser.add_argument("--gen-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--n-ctx", type=int, default=8192)
    args = parser.parse_args()

    started = time.perf_counter()
    from llama_cpp import Llama

    import_s = time.perf_counter() - started
    from halluscope.llm.embedded import resolve_gguf

    path = resolve_gguf(args.model)
    started = time.perf_counter()
    llama = Llama(model_path=str(path), n_ctx=args.n_ctx, n_threads=args.threads, seed=0, verbose=False)
    load_s = time.perf_counter() - started

    text = STORY
    while len(llama.tokenize(text.encode(), add_bos=True)) < args.prompt_tokens:
        text += STORY
    tokens = llama.tokenize(text.encode(), add_bos=True)[: args.prompt_tokens]

    llama.reset()
    started = time.perf_counter()
    llama.eval(tokens)
    prompt_s = time.perf_counter() - started

    generated = 0
    started = time.perf_counter()
    for _ in llama.generate(tokens, temp=0.0, reset=False):  # prompt already evaluated: only new tokens
        generated += 1
        if generated >= args.gen_tokens:
            break
    gen_s = time.perf_counter() - started

    print(json.dumps({
        "model": args.model,
        "gguf": path.name,
        "gguf_mb": round(path.stat().st_size / 2**20, 1),
        "threads": args.threads,
        "import_s": round(import_s, 3),
        "load_s": round(load_s, 3),
        "prompt_tokens": len(tokens),
        "prompt_tok_per_s": round(len(tokens) / prompt_s, 1),
        "gen_tokens": generated,
        "gen_tok_per_s": round(generated / gen_s, 1),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }))


if __name__ == "__main__":
    main()
