"""Structured replies vs plain text on the embedded models: generation tokens/s for each way of asking.

    python benchmarks/structured_speed.py [--model smollm2 --model qwen2.5-coder-1.5b] [--repeats 3]
        [--threads N] [--max-tokens 96] [--compete N] [--way plain --way schema_lazy]
        [--out bench_out/structured_speed.json]

For each model the same two halluscope requests (FActScore's decomposition reply, a list of facts, and a
fact check's verdict reply) are sent through llama.cpp's chat completion in four ways, interleaved so that
a change of machine load hits every way alike:

* ``plain``: no response format (what halluscope's embedded backend sends first by default, see
  ``Config.structured_output``);
* ``json_object``: llama.cpp's JSON grammar;
* ``schema``: ``json_object`` + the reply's JSON schema, compiled into a llama.cpp grammar that
  llama-cpp-python applies to every candidate token at every step (``HALLUSCOPE_EMBEDDED_GRAMMAR=full``);
* ``schema_lazy``: the same grammar through halluscope's lazy sampler (``halluscope.llm.lazy_grammar``, the
  embedded backend's default): the grammar is asked about the greedy token and scans the vocabulary only when
  it rejects it. Its replies must equal ``schema``'s token for token: ``same_as_schema`` counts the
  ``schema_lazy`` replies identical to the ``schema`` reply of the same request and repeat; ``full_passes``
  the steps whose greedy token the grammar rejected.

Generation speed is timed on the streamed tokens (first token to last, so prompt processing and the grammar's
set-up are not in it); ``wall_s`` is the whole request. ``valid`` counts replies that the reply schema's own
parser accepts -- the share of plain first replies that need no repair request. ``--compete N`` starts N
processes that spin on the CPU for the whole run (what "loaded" means in the table); the 1-minute load average
before and after is recorded either way.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from halluscope.llm.embedded import default_threads, resolve_gguf  # noqa: E402
from halluscope.llm.lazy_grammar import lazy_grammar_processor  # noqa: E402
from halluscope.methods.factscore import FactCheckReply, FactsReply  # noqa: E402

MODES = ("plain", "json_object", "schema", "schema_lazy")


def _requests() -> dict[str, tuple[list[dict], type]]:
    source = (ROOT / "examples" / "source.txt").read_text(encoding="utf-8").strip()
    summary = (ROOT / "examples" / "summary.txt").read_text(encoding="utf-8").strip()
    decompose = (f"Split the TEXT below into short atomic facts, one claim each.\n\nTEXT:\n{summary}\n\n"
                 + FactsReply.format_instructions())
    check = (f"SOURCE:\n{source}\n\nFACT: The city pays for the whole project from its own budget.\n\n"
             "Does the SOURCE support the FACT?\n" + FactCheckReply.format_instructions())
    return {"facts": ([{"role": "user", "content": decompose}], FactsReply),
            "verdict": ([{"role": "user", "content": check}], FactCheckReply)}


def _spin() -> None:
    while True:
        pass


def _response_format(mode: str, schema: type) -> dict | None:
    if mode == "json_object":
        return {"type": "json_object"}
    if mode == "schema":
        return {"type": "json_object", "schema": schema.json_schema()}
    return None


def _one(llama, messages: list[dict], schema: type, mode: str, max_tokens: int) -> dict:
    started = time.perf_counter()
    extra: dict = {"response_format": _response_format(mode, schema)}
    processor = None
    if mode == "schema_lazy":  # set-up (compiling the grammar) is in wall_s, as the full grammar's is
        processor = lazy_grammar_processor(llama, json.dumps(schema.json_schema()))
        extra = {"logits_processor": [processor]}
    stream = llama.create_chat_completion(messages=messages, temperature=0.0, max_tokens=max_tokens, seed=0,
                                          stream=True, **extra)
    text, stamps = "", []
    try:
        for chunk in stream:
            delta = chunk["choices"][0].get("delta", {}).get("content")
            if delta:
                stamps.append(time.perf_counter())
                text += delta
    finally:
        if processor is not None:
            processor.close()
    wall = time.perf_counter() - started
    tokens = len(stamps)  # one streamed chunk per generated token
    gen_s = stamps[-1] - stamps[0] if len(stamps) > 1 else 0.0
    try:
        schema.parse(text)
        valid = True
    except Exception:  # noqa: BLE001 - any parse failure means "would need a repair"
        valid = False
    run = {"mode": mode, "tokens": tokens, "gen_s": gen_s, "wall_s": wall, "valid": valid,
           "first_token_s": (stamps[0] - started) if stamps else wall, "text": text}
    if processor is not None:
        run |= {"full_passes": processor.full_passes, "steps": processor.checks, "failed": processor.failed}
    return run


def measure(model: str, threads: int, repeats: int, max_tokens: int, modes: tuple[str, ...] = MODES) -> dict:
    from llama_cpp import Llama

    path = resolve_gguf(model)
    llama = Llama(model_path=str(path), n_ctx=4096, n_threads=threads, n_threads_batch=threads, seed=0,
                  verbose=False)
    runs: list[dict] = []
    for name, (messages, schema) in _requests().items():
        llama.create_chat_completion(messages=messages, max_tokens=1)  # prompt into the KV cache for every way
        for _ in range(repeats):
            texts = {}
            for mode in modes:
                run = _one(llama, messages, schema, mode, max_tokens)
                run["request"] = name
                texts[mode] = run["text"]
                runs.append(run)
            if "schema_lazy" in texts and "schema" in texts:
                runs[-1]["same_as_schema"] = texts["schema_lazy"] == texts["schema"]
            for run in runs[-len(modes):]:
                print(json.dumps({k: v for k, v in run.items() if k != "text"} | {"model": model}), flush=True)
    llama.close()
    summary: dict[str, dict] = {}
    for mode in modes:
        mine = [r for r in runs if r["mode"] == mode]
        tokens = sum(r["tokens"] - 1 for r in mine if r["gen_s"] > 0)
        seconds = sum(r["gen_s"] for r in mine if r["gen_s"] > 0)
        summary[mode] = {
            "tok_per_s": round(tokens / seconds, 2) if seconds else None,
            "median_wall_s": round(statistics.median(r["wall_s"] for r in mine), 2),
            "mean_tokens": round(statistics.mean(r["tokens"] for r in mine), 1),
            "valid": f"{sum(r['valid'] for r in mine)}/{len(mine)}",
        }
        if mode == "schema_lazy":
            summary[mode]["same_as_schema"] = f"{sum(r.get('same_as_schema', False) for r in mine)}/{len(mine)}"
            summary[mode]["full_passes"] = f"{sum(r['full_passes'] for r in mine)}/{sum(r['steps'] for r in mine)}"
    plain = summary["plain"]["tok_per_s"]
    for mode in modes:
        rate = summary[mode]["tok_per_s"]
        summary[mode]["vs_plain"] = round(rate / plain, 2) if rate and plain else None
    return {"model": model, "gguf": path.name, "threads": threads, "summary": summary, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", help="embedded model name or .gguf path (repeatable); "
                        "default: smollm2 and qwen2.5-coder-1.5b")
    parser.add_argument("--repeats", type=int, default=2, help="requests per way and reply kind")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: halluscope's)")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--compete", type=int, default=0, help="CPU-burning processes to run beside it")
    parser.add_argument("--way", action="append", choices=MODES, help="ways to measure (repeatable; plain is "
                        "always one of them, the baseline); default: all four")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON result here")
    args = parser.parse_args()
    models = args.model or ["smollm2", "qwen2.5-coder-1.5b"]
    threads = args.threads or default_threads()

    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.compete)]
    for p in spinners:
        p.start()
    load_before = os.getloadavg()[0]
    try:
        modes = tuple(m for m in MODES if m == "plain" or m in (args.way or MODES))
        results = [measure(m, threads, args.repeats, args.max_tokens, modes) for m in models]
    finally:
        load_after = os.getloadavg()[0]
        for p in spinners:
            p.terminate()
            p.join()
    out = {"compete": args.compete, "cores": os.cpu_count(), "loadavg_1m_before": round(load_before, 2),
           "loadavg_1m_after": round(load_after, 2), "results": results}
    print("\n| model | way | tokens/s | vs plain | median wall s | mean tokens | valid first reply | same as schema "
          "| full passes / steps |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        for mode, s in r["summary"].items():
            print(f"| {r['model']} | {mode} | {s['tok_per_s']} | {s['vs_plain']} | {s['median_wall_s']} | "
                  f"{s['mean_tokens']} | {s['valid']} | {s.get('same_as_schema', '')} | {s.get('full_passes', '')} |")
    print(f"\ncompete={args.compete}, threads={threads}, load average {load_before:.2f} -> {load_after:.2f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
