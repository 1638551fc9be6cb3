"""Retrieval timing over a ~10k-word source (two SQuALITY dev stories joined): index + retrieve for every
sentence of one plot summary. Model load timed separately. Repeats 3x, reports each run."""
import json
import os
import sys
import time
from pathlib import Path
from halluscope import retrieval
from halluscope.retrieval import RetrievalConfig, SourceIndex
from halluscope.text import split_sentences

DATA = Path(os.environ.get("HALLUSCOPE_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
rows = [json.loads(line) for line in open(DATA / "squality" / "dev.jsonl", encoding="utf-8")]
source = rows[0]["document"] + "\n\n" + rows[1]["document"]
summary = rows[0]["plot_summaries"][0]
queries = [s.text for s in split_sentences(summary)]
print(f"source: {len(source.split())} words, {len(split_sentences(source))} sentences; queries: {len(queries)} summary sentences")
t = time.perf_counter(); retrieval.load_encoder(); print(f"embedding model load: {time.perf_counter() - t:.2f}s")
retrieval.encode(["warm up"])
for name in ("embedding", "bm25"):
    for rep in range(3):
        t0 = time.perf_counter()
        index = SourceIndex.build(source, RetrievalConfig(retriever=name, top_k=3, window=1))
        t1 = time.perf_counter()
        snippets = index.retrieve_many(queries)
        t2 = time.perf_counter()
        print(f"{name:9s} run {rep}: index {t1 - t0:.2f}s + retrieve {len(queries)} queries {t2 - t1:.2f}s = {t2 - t0:.2f}s")
