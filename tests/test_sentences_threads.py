"""Sentence splitting from worker threads (sources are indexed off the event loop, several at once) gives
each text its own sentences."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from halluscope.text import split_sentences


def test_split_sentences_is_thread_safe():
    texts = [
        " ".join(f"Text {t} says thing {i} about Dr. Smith in the U.S. today." for i in range(8 + t % 5))
        for t in range(48)
    ]
    alone = [[s.text for s in split_sentences(t)] for t in texts]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda t: [s.text for s in split_sentences(t)], texts))
    assert together == alone
