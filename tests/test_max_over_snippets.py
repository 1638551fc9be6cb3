"""The one max over snippets (long-document stress-test paper Eq. 2):
:func:`halluscope.stages.snippets.max_over_snippets`, the claim pipeline's retrieval protocol that every claim method
(and DCR's batched rounds) goes through."""

from __future__ import annotations

from halluscope.records import Claim, Verdict
from halluscope.retrieval import RetrievalConfig, SourceIndex
from halluscope.stages import Context
from halluscope.stages.snippets import max_over_snippets

TWENTY = " ".join(f"Sentence {i} is about the {'zebra' if i in (8, 9, 10) else f'topic{i}'} here." for i in range(20))


def snippets(*texts: str) -> list[Context]:
    return [Context(text=t, kind="snippet", rank=r) for r, t in enumerate(texts)]


def judged_by(labels: dict[tuple[str, str], str], rounds: list[list[tuple[str, str]]]):
    """A judge that labels (claim text, snippet text) pairs from ``labels`` and records each round's pairs."""

    async def judge_round(pairs: list[tuple[Claim, Context]]) -> list[Verdict]:
        rounds.append([(c.text, ctx.text) for c, ctx in pairs])
        out = []
        for claim, ctx in pairs:
            label = labels[(claim.text, ctx.text)]
            out.append(
                Verdict.unscored(claim, f"cannot judge {ctx.text}")
                if label == "unscored"
                else Verdict(claim=claim, label=label, score=1.0 if label == "supported" else 0.0)
            )
        return out

    return judge_round


async def test_best_label_per_claim_and_a_supporting_snippet_stops_the_claim():
    a, b = Claim(text="a", id="a"), Claim(text="b", id="b")
    labels = {
        ("a", "x"): "unsupported",
        ("a", "y"): "supported",
        ("a", "z"): "unsupported",
        ("b", "x"): "contradicted",
        ("b", "y"): "unsupported",
        ("b", "z"): "unsupported",
    }
    rounds: list[list[tuple[str, str]]] = []
    verdicts, trace = await max_over_snippets(
        [a, b], {"a": snippets("x", "y", "z"), "b": snippets("x", "y", "z")}, judged_by(labels, rounds)
    )
    assert [v.label for v in verdicts] == ["supported", "contradicted"]
    assert verdicts[0].evidence[-1].text == "y"  # the snippet the best verdict came from
    # one pair per open claim per round; "a" is closed by its supporting snippet, "b" tries all three
    assert rounds == [[("a", "x"), ("b", "x")], [("a", "y"), ("b", "y")], [("b", "z")]]
    assert trace["per_snippet"] == {
        "a": [{"rank": 0, "label": "unsupported"}, {"rank": 1, "label": "supported"}],
        "b": [{"rank": r, "label": lab} for r, lab in enumerate(["contradicted", "unsupported", "unsupported"])],
    }


async def test_a_claim_is_unscored_when_no_snippet_is_judged_or_when_it_has_none():
    a, b = Claim(text="a", id="a"), Claim(text="b", id="b")
    rounds: list[list[tuple[str, str]]] = []
    verdicts, trace = await max_over_snippets(
        [a, b], {"a": snippets("x", "y")}, judged_by({("a", "x"): "unscored", ("a", "y"): "unscored"}, rounds)
    )
    assert [v.label for v in verdicts] == ["unscored", "unscored"]
    assert "no snippet could be judged" in verdicts[0].reason
    assert "retrieval found no source snippet" in verdicts[1].reason
    assert trace["per_snippet"]["b"] == [] and len(rounds) == 2


async def test_an_unjudged_snippet_leaves_an_unsupported_claim_unscored_but_not_a_supported_one():
    a, b = Claim(text="a", id="a"), Claim(text="b", id="b")
    labels = {("a", "x"): "unscored", ("a", "y"): "unsupported", ("b", "x"): "unscored", ("b", "y"): "supported"}
    verdicts, _ = await max_over_snippets(
        [a, b], {"a": snippets("x", "y"), "b": snippets("x", "y")}, judged_by(labels, [])
    )
    assert verdicts[0].label == "unscored" and "1 of 2 snippets could not be judged" in verdicts[0].reason
    assert verdicts[1].label == "supported"


async def test_every_overlapping_retrieved_window_is_tried_until_one_supports():
    index = SourceIndex.build(TWENTY, RetrievalConfig(retriever="bm25", top_k=3, window=1))
    (found,) = index.retrieve_many(["zebra"])
    contexts = [
        Context(text=s.text, kind="snippet", span=s.span, rank=r, sentences=s.sentence_indices)
        for r, s in enumerate(found)
    ]
    tried: list[tuple[int, ...]] = []

    async def judge_round(pairs: list[tuple[Claim, Context]]) -> list[Verdict]:
        tried.extend(ctx.sentences for _, ctx in pairs)
        return [Verdict(claim=c, label="unsupported", score=0.0) for c, _ in pairs]

    claim = Claim(text="zebra", id="z")
    (verdict,), _ = await max_over_snippets([claim], {"z": contexts}, judge_round)
    assert sorted(tried) == [(7, 8, 9), (8, 9, 10), (9, 10, 11)]
    assert verdict.label == "unsupported"
