"""Sentence splitting stays linear on long unbroken blocks and keeps its exact-offset invariants."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from halluscope.text import sentences as sentences_module
from halluscope.text import split_sentences
from halluscope.text.sentences import MAX_WINDOW, _pysbd_starts, _sentence_starts

_PROSE = (
    "Dr. Smith moved to the U.S. in 2010. He earned $3.5 million, e.g. from stocks. "
    'She said "I will go." Then she went. "Really?" he asked. Mr. and Mrs. Jones went to Washington D.C. '
    "on Jan. 5. They stayed. Temperatures rose by 2.5 degrees! Prices fell 3.2%. Was it worth it? "
)


def _block(n_words: int) -> str:
    """One block of prose with no blank line or list item in it."""
    words = _PROSE.split()
    reps = -(-n_words // len(words))
    return " ".join((words * reps)[:n_words])


def _check_invariants(text: str, found) -> None:
    covered = [False] * len(text)
    previous_end = 0
    for i, s in enumerate(found):
        assert s.index == i and s.text and s.text == s.text.strip()
        assert s.span.of(text) == s.text
        assert s.span.start >= previous_end
        previous_end = s.span.end
        covered[s.span.start : s.span.end] = [True] * len(s.span)
    assert all(covered[i] or ch.isspace() for i, ch in enumerate(text))


def test_windows_find_the_same_sentences_as_one_pysbd_pass() -> None:
    text = _block(4_000)  # ~24k characters: several windows, still quick for a single pysbd pass
    assert len(text) > 4 * MAX_WINDOW
    windowed = _sentence_starts(text, "en")
    assert windowed == _pysbd_starts(text, "en")
    assert _sentence_starts(text, "en", window=700) == windowed  # small windows too


def test_a_sentence_longer_than_the_window_is_cut_at_whitespace(monkeypatch) -> None:
    text = ("word " * 3_000).strip() + ". Next one."
    found = split_sentences(text)
    _check_invariants(text, found)
    assert all(len(s.text) <= MAX_WINDOW for s in found)
    assert found[-1].text == "Next one."
    assert not any(s.text.startswith("ord") for s in found)  # cut between words, not inside one


def test_a_long_run_without_whitespace_is_hard_cut_and_still_covered() -> None:
    text = "x" * (3 * MAX_WINDOW + 17) + " tail."
    found = split_sentences(text)
    _check_invariants(text, found)
    assert "".join(s.text for s in found).replace(" ", "") == text.replace(" ", "")
    assert all(len(s.text) <= MAX_WINDOW + len(" tail.") for s in found)


def test_window_edges_keep_every_character(monkeypatch) -> None:
    monkeypatch.setattr(sentences_module, "MAX_WINDOW", 300)
    for n_words in (50, 51, 199, 400, 1_001):
        text = _block(n_words) + " a.?? end\tof text "
        _check_invariants(text, split_sentences(text))


def test_a_long_unbroken_block_splits_in_linear_time(monkeypatch) -> None:
    """One pysbd pass over a block is quadratic (32k words: 45 s); windowed splitting is linear, ~12 us per
    character: 13 s for 200k words and 65 s for 1,000,000 words (5.3 M characters, measured on a loaded
    2-core machine). Checked here by the work, not the clock: pysbd (whose cost per call is bounded once its
    input is) never gets more than ``MAX_WINDOW`` characters, and reads each character about once in all, so 4x
    the words is about 4x the work."""
    handed: list[int] = []
    real = sentences_module._pysbd_starts

    def counting(piece: str, language: str) -> list[int]:
        handed.append(len(piece))
        return real(piece, language)

    monkeypatch.setattr(sentences_module, "_pysbd_starts", counting)
    work = {}
    for n_words in (12_000, 48_000):
        text = _block(n_words)
        handed.clear()
        found = split_sentences(text)
        assert len(found) > n_words // 20
        for s in found[:: max(1, len(found) // 200)]:
            assert s.span.of(text) == s.text
        assert max(handed) <= MAX_WINDOW and len(handed) > len(text) // MAX_WINDOW  # read in windows
        assert len(text) <= sum(handed) <= 1.1 * len(text), (sum(handed), len(text))  # each character ~once
        work[n_words] = sum(handed)
    assert 3.9 < work[48_000] / work[12_000] < 4.1, work


_PIECES = list("ab Z.?!\n\t\"'“”…:;(),é0") + ["Dr.", "U.S.", "e.g.", "3.5", "  ", "xxxxxxxxxxxx"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_PIECES), max_size=80).map("".join), st.integers(min_value=8, max_value=60))
def test_small_windows_give_ordered_starts_on_text(text: str, window: int) -> None:
    starts = _sentence_starts(text, "en", window=window)
    assert starts == sorted(set(starts))
    assert all(0 <= s < len(text) and not text[s].isspace() for s in starts)
