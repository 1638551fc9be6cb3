"""The C-speed ROUGE of ``methods/rouge.py`` gives rouge-score's numbers: 500 pairs to 1e-9."""

from __future__ import annotations

import json
import random

import pytest

from halluscope.methods.rouge import ROUGE_TYPES, Rouge, rouge_scores, rouge_tokens
from tests.conftest import DATA_DIR

BENCH_EXTRA = "the reference rouge-score is in the bench extra: pip install 'halluscope[bench]'"
rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer", reason=BENCH_EXTRA)
tokenizers = pytest.importorskip("rouge_score.tokenizers", reason=BENCH_EXTRA)

TOLERANCE = 1e-9
SYNTHETIC_PAIRS = 300
DATA_PAIRS = 200  # 100 QAGS CNN/DM + 25 per SummEdits domain: 500 pairs in all when the shared data is there

_WORDS = (
    "the a of to in and is was running runs ran runner connection connected connecting connects "
    "generously generous relational relate happiness happy caresses ponies ties caress cats "
    "flies dies agreed owned humbled sized meeting stating siezing itemization sensational "
    "traditional reference colonizer plotted Bakery bakeries MAY may 2001 3.5 x86 CO2 e-mail "
    "naïve café straße İstanbul ﬁre Ωmega 日本 l'hôtel don't U.S. it's"
)
WORDS = _WORDS.split()
PUNCT = [",", ".", "!", "?", " - ", "'", '"', "(", ")", ";", ":", "\n", "\t", "...", " / "]


def _text(rng: random.Random, n: int) -> str:
    parts = []
    for _ in range(n):
        parts.append(rng.choice(WORDS))
        parts.append(rng.choice(PUNCT) if rng.random() < 0.15 else " ")
    return "".join(parts)


def _edit(rng: random.Random, text: str) -> str:
    """A prediction that shares long subsequences with ``text`` (so the LCS is not trivial)."""
    words = text.split()
    out = []
    for w in words:
        r = rng.random()
        if r < 0.15:
            continue
        out.append(rng.choice(WORDS) if r < 0.3 else w)
        if rng.random() < 0.05:
            out.append(rng.choice(WORDS))
    return " ".join(out)


def synthetic_pairs(n: int, seed: int = 13) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs: list[tuple[str, str]] = [
        ("", ""),
        ("", "word"),
        ("word", ""),
        ("!!! ...", "the cat"),
        ("a b c", "a b c"),
        ("Run, run, RUN!", "run"),
        ("日本 ﬁre", "日本 ﬁre"),
    ]
    while len(pairs) < n:
        ref = _text(rng, rng.choice([0, 1, 2, 5, 20, 60, 200]))
        pred = _edit(rng, ref) if rng.random() < 0.7 else _text(rng, rng.choice([1, 3, 10, 40]))
        pairs.append((ref, pred))
    return pairs


def data_pairs() -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    qags = DATA_DIR / "qags" / "cnndm_dev.jsonl"
    if qags.is_file():
        rows = [json.loads(line) for line in qags.read_text(encoding="utf-8").splitlines() if line.strip()]
        pairs += [(r["source"], r["summary"]) for r in rows[:100]]
    for path in sorted((DATA_DIR / "summedits").glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        pairs += [(r["doc"], r["summary"]) for r in random.Random(path.name).sample(rows, min(25, len(rows)))]
    return pairs


def assert_equal_to_rouge_score(pairs: list[tuple[str, str]]) -> None:
    reference = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    for ref, pred in pairs:
        expected = reference.score(ref, pred)
        got = rouge_scores(ref, pred)
        for name in ROUGE_TYPES:
            for field in ("precision", "recall", "fmeasure"):
                want, have = getattr(expected[name], field), getattr(got[name], field)
                assert abs(want - have) <= TOLERANCE, (name, field, want, have, ref[:80], pred[:80])


def test_equal_to_rouge_score_on_synthetic_pairs():
    pairs = synthetic_pairs(SYNTHETIC_PAIRS)
    assert len(pairs) == SYNTHETIC_PAIRS
    assert_equal_to_rouge_score(pairs)


def test_equal_to_rouge_score_on_shared_data_pairs():
    if not DATA_DIR.is_dir():
        pytest.skip(
            f"shared data folder not found at {DATA_DIR} (set HALLUSCOPE_DATA_DIR); the synthetic-pair test still ran"
        )
    pairs = data_pairs()
    if not pairs:
        pytest.skip(f"no QAGS or SummEdits files under {DATA_DIR}")
    assert len(pairs) == DATA_PAIRS
    assert_equal_to_rouge_score(pairs)


def test_tokens_are_rouge_scores_tokens():
    stemmed, plain = tokenizers.DefaultTokenizer(use_stemmer=True), tokenizers.DefaultTokenizer(use_stemmer=False)
    for ref, pred in synthetic_pairs(60, seed=5):
        for text in (ref, pred):
            assert rouge_tokens(text) == stemmed.tokenize(text)
            assert rouge_tokens(text, stem=False) == plain.tokenize(text)


def test_other_orders_token_input_and_bad_types():
    ref, pred = "The cats ran to the old mill. The mill burned.", "The old mill burned; cats ran."
    expected = rouge_scorer.RougeScorer(["rouge3", "rougeL"], use_stemmer=False).score(ref, pred)
    got = rouge_scores(rouge_tokens(ref, stem=False), rouge_tokens(pred, stem=False), types=["rouge3", "rougeL"])
    assert {k: (v.precision, v.recall, v.fmeasure) for k, v in got.items()} == {
        k: tuple(v) for k, v in expected.items()
    }
    for bad in ("rouge0", "rougeLsum", "bleu"):
        with pytest.raises(ValueError, match="unknown ROUGE type"):
            rouge_scores(ref, pred, types=[bad])


def test_method_reports_rouge_score_precisions():
    source = "The council approved the new budget on Monday after a long debate about the ferry."
    target = "On Monday the council approved a budget for the ferries."
    expected = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True).score(source, target)
    report = Rouge().check(source, target)
    assert report.subscores == {k: v.precision for k, v in expected.items()}
    assert report.score == pytest.approx(sum(v.precision for v in expected.values()) / 3, abs=1e-12)
    assert Rouge(variant="rougeL").check(source, target).score == expected["rougeL"].precision
