"""Text without sentence breaks is cut at whitespace into pieces of at most ``MAX_WINDOW`` characters without
pysbd (slowest there: 5 MB without a break took the gate 48 s and 765 MB on 22b0ee2), with a warning."""

from __future__ import annotations

import logging

import halluscope.text.sentences as sentences
from halluscope.text.sentences import MAX_WINDOW, split_sentences

UNBROKEN = "lorem ipsum dolor sit amet consectetur " * 30_000  # 1.2 MB, no sentence mark, no line break


def test_an_unbroken_run_never_reaches_pysbd_and_is_cut_at_the_documented_length(monkeypatch, caplog):
    calls = []
    real = sentences._pysbd_starts
    monkeypatch.setattr(sentences, "_pysbd_starts", lambda piece, lang: calls.append(len(piece)) or real(piece, lang))
    with caplog.at_level(logging.WARNING, logger="halluscope.text.sentences"):
        out = split_sentences(UNBROKEN)
    assert calls == []
    assert all(len(s.text) <= MAX_WINDOW for s in out) and len(out) >= len(UNBROKEN) // MAX_WINDOW
    assert "".join(s.text for s in out).replace(" ", "") == UNBROKEN.replace(" ", "")  # nothing lost
    assert all(UNBROKEN[s.span.start : s.span.end] == s.text for s in out)
    assert any("without a sentence break" in r.getMessage() for r in caplog.records)


def test_text_with_breaks_is_still_split_by_pysbd(monkeypatch):
    text = "The council met on Monday. It approved the budget.\nDr. Smith spoke first! Then the vote"
    assert [s.text for s in split_sentences(text)] == [
        "The council met on Monday.",
        "It approved the budget.",
        "Dr. Smith spoke first!",
        "Then the vote",
    ]
    mixed = UNBROKEN[:20_000] + "The end. Really the end."
    out = split_sentences(mixed)
    assert out[-2].text.endswith("The end.") and out[-1].text == "Really the end."


def test_a_gate_check_on_an_unbroken_source_and_target_finishes_without_pysbd(monkeypatch):
    from halluscope.methods import get_method

    calls = []
    monkeypatch.setattr(sentences, "_pysbd_starts", lambda piece, lang: calls.append(len(piece)) or [0])
    report = get_method("gate").check(UNBROKEN[:400_000], UNBROKEN[:40_000])
    assert calls == [] and report.score is not None and len(report.claims) >= 8
