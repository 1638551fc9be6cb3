"""Inversion counts, ShuffleD and the Lehmer-code shuffle (DoveScore paper, Algorithm 1)."""

from __future__ import annotations

import itertools
import random
from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halluscope.permutations import (
    DIFFICULTY_BINS,
    count_inversions,
    from_lehmer_code,
    inversion_range,
    inverted_pairs,
    lehmer_code,
    permutation_with_inversions,
    random_lehmer_code,
    shuffle_degree,
)


def brute_inversions(seq) -> int:
    return sum(1 for i in range(len(seq)) for j in range(i + 1, len(seq)) if seq[i] > seq[j])


@given(st.lists(st.integers(min_value=-50, max_value=50), max_size=60))
def test_count_inversions_matches_brute_force(seq):
    assert count_inversions(seq) == brute_inversions(seq)
    assert len(inverted_pairs(seq)) == brute_inversions(seq)


def test_count_inversions_known_values():
    assert count_inversions([]) == 0
    assert count_inversions([7]) == 0
    assert count_inversions([0, 1, 2, 3]) == 0
    assert count_inversions([3, 2, 1, 0]) == 6
    assert count_inversions([1, 0, 2]) == 1
    assert count_inversions([2, 2, 1]) == 2  # ties are not inversions
    assert count_inversions(list(range(2000, 0, -1))) == comb(2000, 2)
    assert inverted_pairs([2, 0, 1]) == [(0, 1), (0, 2)]


def test_shuffle_degree():
    assert shuffle_degree([0, 1, 2, 3]) == 0.0
    assert shuffle_degree([3, 2, 1, 0]) == 1.0
    assert shuffle_degree([1, 0, 2, 3]) == pytest.approx(1 / 6)
    with pytest.raises(ValueError):
        shuffle_degree([0])


@given(st.permutations(list(range(9))))
def test_lehmer_round_trip(perm):
    code = lehmer_code(perm)
    assert from_lehmer_code(code) == list(perm)
    assert sum(code) == count_inversions(perm)
    assert all(0 <= c <= len(perm) - 1 - i for i, c in enumerate(code))


def test_lehmer_code_rejects_bad_input():
    with pytest.raises(ValueError):
        from_lehmer_code([3, 0, 0])
    with pytest.raises(ValueError):
        lehmer_code([0, 0, 1])


@pytest.mark.parametrize("n", range(0, 8))
def test_exact_inversion_count_for_every_k_small_n(n):
    rng = random.Random(n)
    for k in range(comb(n, 2) + 1):
        for _ in range(3):
            perm = permutation_with_inversions(n, k, rng)
            assert sorted(perm) == list(range(n))
            assert brute_inversions(perm) == k


def test_shuffle_reaches_many_distinct_permutations():
    rng = random.Random(0)
    seen = {tuple(permutation_with_inversions(5, 4, rng)) for _ in range(400)}
    all_with_4 = {p for p in itertools.permutations(range(5)) if brute_inversions(p) == 4}
    assert seen <= all_with_4
    assert len(seen) >= len(all_with_4) // 2  # random, not one fixed answer


def test_out_of_range_count_raises():
    with pytest.raises(ValueError):
        random_lehmer_code(4, 7, random.Random(0))
    with pytest.raises(ValueError):
        random_lehmer_code(4, -1, random.Random(0))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=5, max_value=120),
    difficulty=st.sampled_from(sorted(DIFFICULTY_BINS)),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    data=st.data(),
)
def test_large_n_lands_in_the_difficulty_bin(n, difficulty, seed, data):
    low, high = DIFFICULTY_BINS[difficulty]
    bounds = inversion_range(n, low, high)
    assert bounds is not None  # C(n,2) >= 10 makes every 0.10-wide bin hold an integer
    k = data.draw(st.integers(min_value=bounds[0], max_value=bounds[1]))
    perm = permutation_with_inversions(n, k, random.Random(seed))
    assert count_inversions(perm) == k
    assert float(low) <= shuffle_degree(perm) <= float(high)


def test_inversion_range_exact_bounds():
    assert inversion_range(3, "0.80", "0.90") is None  # C=3: 2.4..2.7 holds no integer
    assert inversion_range(5, "0.80", "0.90") == (8, 9)  # C=10
    assert inversion_range(21, "0.55", "0.65") == (116, 136)  # C=210; 0.55*210 = 115.5
    assert inversion_range(1, "0.0", "1.0") is None
    assert inversion_range(6, "0.05", "0.15") == (1, 2)  # C=15
