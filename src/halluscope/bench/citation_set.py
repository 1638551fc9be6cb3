"""A seeded citation benchmark built from the shared dev data, and its runner (docs/citations.md, "Benchmark").

**The set** (:func:`build_citation_set`): each item takes one QAGS-CNNDM article (``qags/cnndm_dev.jsonl``), cuts
it into chunks of ``chunk_sentences`` sentences, keeps ``chunks_per_item`` of them and adds one chunk from another
article (an irrelevant chunk, as a retriever returns). The answer is ``sentences_per_answer`` sentences taken
verbatim from different kept chunks, each citing its chunk. Then, per sentence, with the seeded generator: with
probability ``p_swap`` its citation is swapped to another chunk of the article, with ``p_irrelevant`` pointed at
the irrelevant chunk, with ``p_drop`` dropped; and ``unsupported_per_answer`` sentences from yet another article
(supported by no chunk) are inserted, each citing a random chunk. Every sentence keeps its gold: the chunk that
supports it (None for an inserted one), what was done to its citation, and the gold citation recall and
precision follow. Sentences are taken, not paraphrased (a paraphrase needs a model; the set is built without one).
The same seed and data give the same file.

**The run** (:func:`run_citation_bench`): the citation check and the guard's ``filter`` decision on every item
with one scorer (the verdict-first scorer on a model, or the lexical gate with no model), written item by item to
a JSONL results file whose first line pins the run (scorer, model, threshold, streaming settings); a run stopped
midway resumes without repeating a finished item, and a different run is refused instead of mixed in.
:func:`select_items` takes the first ``limit`` items or a seeded ``sample`` of them. The summary: wrong-citation
detection precision, recall and F1 (a wrong citation: a swapped or irrelevant citation whose sentence a chunk
supports; detected when the check says ``wrong_citation``), how often the named chunk is the gold one, the mean
citation recall and precision estimated against the gold means, guard outcomes (unsupported sentences removed,
supported sentences wrongly removed), sentences left unscored, seconds, scorer questions and scorer calls per
answer, and, with ``stream=True``, the streaming guard fed the answer word by word (one word every
``token_interval`` seconds, as a model streams it): per sentence its release latency (from its last word to its
release), the time its check took (the time to score that sentence) and the share of sentences released within
that time plus 10 %.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halluscope.records import Claim, Verdict
from halluscope.text.citations import parse_citations, render_marker
from halluscope.text.sentences import split_sentences

SOURCE_FILE = "qags/cnndm_dev.jsonl"


@dataclass(frozen=True)
class CitationSetConfig:
    """How the set is built (saved with it)."""

    seed: int = 13
    items: int = 40
    chunk_sentences: int = 3
    chunks_per_item: int = 4
    sentences_per_answer: int = 3
    p_swap: float = 0.25
    p_irrelevant: float = 0.1
    p_drop: float = 0.1
    unsupported_per_answer: int = 1
    min_words: int = 8


def detokenize(text: str) -> str:
    """CNN/DM's tokenized text (``age 122 .``, ``calment 's``, `` ` quote '``) as ordinary prose, so sentences
    split where they end."""
    text = " ".join(text.split())
    text = re.sub(r" ([.,!?;:%)])", r"\1", text)
    text = re.sub(r"([(]) ", r"\1", text)
    text = re.sub(r" (n't|'s|'re|'ve|'ll|'d|'m)\b", r"\1", text)
    text = re.sub(r" '(?=[\s.,;:!?]|$)", "'", text)  # a closing quote
    return text.replace("` ", "'")


def _sentences(text: str) -> list[str]:
    return [s.text for s in split_sentences(detokenize(text))]


def _chunks(text: str, size: int) -> list[list[str]]:
    sentences = _sentences(text)
    return [sentences[i : i + size] for i in range(0, len(sentences) - size + 1, size)]


def _long_enough(sentence: str, min_words: int) -> bool:
    """A sentence to take: ``min_words`` to 60 words, ending with a full stop, holding no other sentence end and
    nothing that reads as a citation marker."""
    words = len(sentence.split())
    inner = sentence[:-1]
    return (
        min_words <= words <= 60
        and sentence[-1:] in ".!?"
        and not re.search(r"[.!?] [A-Z]", inner)
        and not re.search(r"[\[(]", sentence)
    )


def build_citation_set(articles: Sequence[str], config: CitationSetConfig) -> list[dict[str, Any]]:
    """The items (see the module docstring); ``articles`` are source texts, at least three."""
    if len(articles) < 3:
        raise ValueError("a citation set needs at least three articles")
    rng = random.Random(config.seed)
    items: list[dict[str, Any]] = []
    order = list(range(len(articles)))
    rng.shuffle(order)
    for n, a in enumerate(order):
        if len(items) >= config.items:
            break
        chunks = _chunks(articles[a], config.chunk_sentences)
        if len(chunks) < config.chunks_per_item:
            continue
        kept = sorted(rng.sample(range(len(chunks)), config.chunks_per_item))
        others = [o for o in order if o != a]
        irrelevant_article, unsupported_article = rng.sample(others, 2)
        far = _chunks(articles[irrelevant_article], config.chunk_sentences)
        if not far:
            continue
        texts = [" ".join(chunks[k]) for k in kept]
        irrelevant = len(texts)
        texts.append(" ".join(rng.choice(far)))
        usable = [(i, s) for i, k in enumerate(kept) for s in chunks[k] if _long_enough(s, config.min_words)]
        by_chunk: dict[int, list[str]] = {}
        for i, s in usable:
            by_chunk.setdefault(i, []).append(s)
        if len(by_chunk) < config.sentences_per_answer:
            continue
        sentences: list[dict[str, Any]] = []
        for i in sorted(rng.sample(sorted(by_chunk), config.sentences_per_answer)):
            text = rng.choice(by_chunk[i])
            roll = rng.random()
            if roll < config.p_swap:
                cited, kind = [rng.choice([j for j in range(irrelevant) if j != i])], "swapped"
            elif roll < config.p_swap + config.p_irrelevant:
                cited, kind = [irrelevant], "irrelevant"
            elif roll < config.p_swap + config.p_irrelevant + config.p_drop:
                cited, kind = [], "dropped"
            else:
                cited, kind = [i], "correct"
            sentences.append({"text": text, "supported_by": i, "cited": cited, "kind": kind})
        foreign = [s for s in _sentences(articles[unsupported_article]) if _long_enough(s, config.min_words)]
        for text in rng.sample(foreign, min(config.unsupported_per_answer, len(foreign))):
            at = rng.randrange(len(sentences) + 1)
            sentences.insert(
                at, {"text": text, "supported_by": None, "cited": [rng.randrange(irrelevant)], "kind": "unsupported"}
            )
        answer = " ".join(_cited(s) for s in sentences)
        if len(parse_citations(answer).sentences) != len(sentences):
            continue  # the splitter would not read back the sentences built: not a fair item
        items.append({"id": f"cite-{n:04d}", "chunks": texts, "answer": answer, "sentences": sentences})
    return items


def _cited(sentence: dict[str, Any]) -> str:
    text: str = sentence["text"]
    if not sentence["cited"]:
        return text
    body, stop = (text[:-1], text[-1]) if text[-1:] in ".!?" else (text, "")
    return f"{body} {render_marker('brackets', tuple(sentence['cited']))}{stop}"


def gold_recall_precision(item: dict[str, Any]) -> tuple[float, float | None]:
    """The item's gold citation recall (share of sentences whose citations include the chunk that supports them)
    and precision (share of citations that point at it)."""
    sentences = item["sentences"]
    recall = sum(1 for s in sentences if s["supported_by"] is not None and s["supported_by"] in s["cited"])
    citations = sum(len(s["cited"]) for s in sentences)
    correct = sum(1 for s in sentences for c in s["cited"] if c == s["supported_by"])
    return recall / len(sentences), (correct / citations if citations else None)


def save_citation_set(path: Path, items: Sequence[dict[str, Any]], config: CitationSetConfig) -> None:
    """One JSON object per line; the first line holds the build settings."""
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"citation_set": config.__dict__, "source": SOURCE_FILE}) + "\n")
        for item in items:
            out.write(json.dumps(item) + "\n")


def load_citation_set(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines or "citation_set" not in lines[0]:
        raise ValueError(f"{path}: not a citation set (its first line holds the build settings)")
    return lines[0], lines[1:]


def read_articles(data_dir: Path) -> list[str]:
    path = data_dir / SOURCE_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: the citation set is built from the shared dev data")
    return [json.loads(line)["source"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class GateScorer:
    """The lexical gate as a sentence scorer (no model): a settled decision keeps its label, an uncertain one is
    labelled by its lexical support score against ``threshold``."""

    def __init__(self, threshold: float = 0.5):
        from halluscope.methods.gate import LexicalGate

        self.gate = LexicalGate()
        self.threshold = threshold
        self.calls = 0

    async def score(self, claim: Claim, context: Any) -> Verdict:
        from halluscope.methods.gate import gate_verdict

        [decision] = await self.gate([claim], context.text)
        self.calls += 1
        return gate_verdict(decision, "lexical", uncertain="threshold", threshold=self.threshold)


class ResultsError(ValueError):
    """A results file that holds another run's results (another scorer, model, threshold or streaming setting)."""


class CountingScorer:
    """A scorer that counts the calls it passes on to ``scorer`` and times each (seconds, in ``seconds``)."""

    def __init__(self, scorer: Any):
        self.scorer = scorer
        self.name = getattr(scorer, "name", None) or type(scorer).__name__
        self.seconds: list[float] = []

    @property
    def calls(self) -> int:
        return len(self.seconds)

    async def score(self, claim: Claim, context: Any) -> Verdict:
        started = time.perf_counter()
        try:
            verdict: Verdict = await self.scorer.score(claim, context)
        finally:
            self.seconds.append(time.perf_counter() - started)
        return verdict


def select_items(
    items: Sequence[dict[str, Any]], limit: int | None = None, sample: int | None = None, seed: int = 13
) -> list[dict[str, Any]]:
    """The items to run: a seeded random ``sample`` of them (kept in set order), then the first ``limit``."""
    chosen = list(items)
    if sample is not None and sample < len(chosen):
        keep = set(random.Random(seed).sample(range(len(chosen)), sample))
        chosen = [item for n, item in enumerate(chosen) if n in keep]
    return chosen[:limit] if limit is not None else chosen


def set_digest(items: Sequence[dict[str, Any]]) -> str:
    """The SHA-256 of the items (what a results file was computed on)."""
    digest = hashlib.sha256()
    for item in items:
        digest.update(json.dumps(item, sort_keys=True).encode("utf-8"))
    return digest.hexdigest()


def _score_item(item: dict[str, Any], result: Any, decisions: Sequence[Any]) -> dict[str, Any]:
    rows = []
    for gold, checked, decision in zip(item["sentences"], result.sentences, decisions):
        rows.append(
            {
                "kind": gold["kind"],
                "gold_chunk": gold["supported_by"],
                "status": checked.status,
                "named": checked.supporting[0] if checked.supporting else None,
                "removed": decision.action == "removed",
            }
        )
    return {"sentences": rows, "recall": result.recall, "precision": result.precision}


async def paced(text: str, interval: float) -> AsyncIterator[str]:
    """``text`` word by word (each word with the spaces after it), one every ``interval`` seconds."""
    for n, word in enumerate(re.findall(r"\S+\s*", text)):
        if n and interval > 0:
            await asyncio.sleep(interval)
        yield word


async def stream_item(item: dict[str, Any], scorer: Any, threshold: float, interval: float) -> dict[str, Any]:
    """The streaming guard (``filter``) on the item's answer fed word by word: per sentence the release latency
    (its last word to its release), its check time and the wait from its completion to its release."""
    from halluscope.methods.guard import aguard_stream

    counted = CountingScorer(scorer)
    latency, check, wait = [], [], []
    async for r in aguard_stream(item["chunks"], paced(item["answer"], interval), scorer=counted, threshold=threshold):
        latency.append(r.latency_s)
        check.append(r.check_s)
        wait.append(None if r.completed_at is None else max(0.0, r.released_at - r.completed_at))
    return {
        "release_latency_s": latency,
        "sentence_check_s": check,
        "release_wait_s": wait,
        "stream_calls": counted.calls,
    }


async def check_item(
    item: dict[str, Any], scorer: Any, threshold: float, stream: bool, token_interval: float = 0.02
) -> dict[str, Any]:
    """One item: the check, the guard's ``filter`` decisions and (``stream``) the streaming guard's latencies."""
    from halluscope.methods.citations import CitationChecker
    from halluscope.methods.guard import decide
    from halluscope.text.citations import parse_citations

    started = time.perf_counter()
    counted = CountingScorer(scorer)
    checker = CitationChecker(counted, item["chunks"], threshold=threshold, uncited="check")
    parsed = parse_citations(item["answer"])
    if len(parsed.sentences) != len(item["sentences"]):
        return {"id": item["id"], "error": f"{len(parsed.sentences)} sentences read, {len(item['sentences'])} built"}
    result = await checker.check(parsed)
    decisions = [await decide(checker, r, "filter", parsed.style) for r in result.sentences]
    out = {"id": item["id"], **_score_item(item, result, decisions), "seconds": time.perf_counter() - started}
    out["questions"] = checker.questions
    out["calls"] = counted.calls
    if stream:
        out.update(await stream_item(item, scorer, threshold, token_interval))
    return out


def summarize(results: Sequence[dict[str, Any]], items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The bench table's numbers (see the module docstring)."""
    done = [r for r in results if "error" not in r]
    rows = [row for r in done for row in r["sentences"]]
    wrong = [row for row in rows if row["kind"] in ("swapped", "irrelevant")]
    predicted = [row for row in rows if row["status"] == "wrong_citation"]
    tp = sum(1 for row in predicted if row["kind"] in ("swapped", "irrelevant"))
    precision = tp / len(predicted) if predicted else None
    recall = tp / len(wrong) if wrong else None
    f1 = 2 * precision * recall / (precision + recall) if precision and recall else 0.0
    named_right = sum(1 for row in predicted if row["named"] == row["gold_chunk"])
    supported = [row for row in rows if row["gold_chunk"] is not None]
    unsupported = [row for row in rows if row["gold_chunk"] is None]
    gold = {item["id"]: gold_recall_precision(item) for item in items}
    est_recall = [r["recall"] for r in done if r["recall"] is not None]
    est_precision = [r["precision"] for r in done if r["precision"] is not None]
    gold_precision = [gold[r["id"]][1] for r in done if gold[r["id"]][1] is not None]
    latencies = [x for r in done for x in r.get("release_latency_s", [])]
    timed = [
        timing
        for r in done
        for timing in zip(r.get("release_latency_s", []), r.get("sentence_check_s", []), r.get("release_wait_s", []))
        if timing[1] is not None and timing[2] is not None
    ]

    def mean(xs: list[Any]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    def share(xs: list[bool]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    return {
        "answers": len(done),
        "errors": len(results) - len(done),
        "sentences": len(rows),
        "wrong_citations": len(wrong),
        "wrong_citation_precision": precision,
        "wrong_citation_recall": recall,
        "wrong_citation_f1": f1,
        "named_chunk_right": named_right / len(predicted) if predicted else None,
        "citation_recall_estimated": mean(est_recall),
        "citation_recall_gold": mean([gold[r["id"]][0] for r in done]),
        "citation_precision_estimated": mean(est_precision),
        "citation_precision_gold": mean(gold_precision),
        "unsupported_removed": mean([1.0 if row["removed"] else 0.0 for row in unsupported]),
        "supported_wrongly_removed": mean([1.0 if row["removed"] else 0.0 for row in supported]),
        "unscored_sentences": sum(1 for row in rows if row["status"] == "unscored"),
        "seconds_per_answer": mean([r["seconds"] for r in done]),
        "questions_per_answer": mean([r.get("questions", r["calls"]) for r in done]),
        "calls_per_answer": mean([r["calls"] for r in done]),
        "stream_calls_per_answer": mean([r["stream_calls"] for r in done if "stream_calls" in r]),
        "release_latency_s_mean": mean(latencies),
        "release_latency_s_max": max(latencies) if latencies else None,
        "sentence_check_s_mean": mean([chk for _, chk, _ in timed]),
        "release_wait_s_mean": mean([wait for _, _, wait in timed]),
        "released_within_check_plus_10pct": share([lat <= 1.1 * chk for lat, chk, _ in timed]),
        "released_within_check_plus_10pct_after_complete": share([wait <= 1.1 * chk for _, chk, wait in timed]),
    }


def _load_results(results_path: Path, run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The finished rows of ``results_path`` by item id; claims a new file for ``run`` (its first line). A file of
    another run is refused (:class:`ResultsError`); a line cut short by a crash is dropped (that item is redone)."""
    if not results_path.exists() or not results_path.read_text(encoding="utf-8").strip():
        results_path.write_text(json.dumps({"run": run}) + "\n", encoding="utf-8")
        return {}
    lines = results_path.read_text(encoding="utf-8").splitlines()
    try:
        old = json.loads(lines[0]).get("run")
    except (json.JSONDecodeError, AttributeError):
        old = None
    if old != json.loads(json.dumps(run)):
        differ = [k for k in run if not isinstance(old, dict) or old.get(k) != run[k]]
        raise ResultsError(
            f"{results_path} holds a different run (differs in: {', '.join(differ) or 'its first line'}); "
            "delete it or choose another --results"
        )
    done: dict[str, dict[str, Any]] = {}
    good = [lines[0]]
    for line in lines[1:]:
        try:
            row = json.loads(line)
            done[row["id"]] = row
            good.append(line)
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    if len(good) < len(lines):
        results_path.write_text("".join(line + "\n" for line in good), encoding="utf-8")
    return done


async def run_citation_bench(
    items: Sequence[dict[str, Any]],
    scorer: Any,
    results_path: Path,
    *,
    threshold: float = 0.5,
    stream: bool = False,
    token_interval: float = 0.02,
    run: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Check every item not yet in ``results_path`` (appending one line each), then summarize them all.
    ``run`` names what else pins the results (the model); the scorer, threshold and streaming settings are added."""
    name = getattr(scorer, "name", None) or type(scorer).__name__
    pinned = {
        "scorer": name,
        **(run or {}),
        "threshold": threshold,
        "stream": stream,
        "token_interval": token_interval if stream else None,
    }
    done = _load_results(results_path, pinned)
    with results_path.open("a", encoding="utf-8") as out:
        for item in items:
            if item["id"] in done:
                continue
            row = await check_item(item, scorer, threshold, stream, token_interval)
            out.write(json.dumps(row) + "\n")
            out.flush()
            done[row["id"]] = row
    return summarize([done[i["id"]] for i in items if i["id"] in done], items)
