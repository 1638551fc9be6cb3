"""Permutation arithmetic for event order: inversion counts, ShuffleD, Lehmer codes (DoveScore paper, §3.1.2, App. B.1).

Conventions (0-based throughout):

- A permutation ``perm`` of ``range(n)`` lists, position by position, which ORIGINAL item sits there:
  ``shuffled[i] = original[perm[i]]`` (the paper's ``f_i = e_pi(i)``).
- ``Inv(perm)`` counts the pairs ``i < j`` with ``perm[i] > perm[j]``, i.e. the pairs of items that the
  shuffled list presents in the opposite of their original order.
- ``ShuffleD = Inv / C(n, 2)``: the fraction of pairs that are OUT of their original order. 0 is the
  original order, 1 is fully reversed. A lower ShuffleD is closer to the original, hence a harder lie;
  so "easy" lies have ShuffleD in [0.80, 0.90] (most pairs swapped) and "extreme" ones [0.05, 0.15].
- The Lehmer code ``code[i]`` is the number of later positions holding a smaller item than position
  ``i``; ``0 <= code[i] <= n - 1 - i`` and ``sum(code) == Inv(perm)``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from fractions import Fraction
from math import ceil, comb, floor
from typing import Any

__all__ = [
    "DIFFICULTY_BINS",
    "count_inversions",
    "from_lehmer_code",
    "inversion_range",
    "inverted_pairs",
    "lehmer_code",
    "permutation_with_inversions",
    "random_lehmer_code",
    "shuffle_degree",
]

# ShuffleD bins of the MontageLie difficulty levels (inclusive bounds), as strings for exact arithmetic.
DIFFICULTY_BINS: dict[str, tuple[str, str]] = {
    "easy": ("0.80", "0.90"),
    "medium": ("0.55", "0.65"),
    "hard": ("0.30", "0.40"),
    "extreme": ("0.05", "0.15"),
}


def count_inversions(seq: Sequence[Any]) -> int:
    """Pairs ``i < j`` with ``seq[i] > seq[j]``, by merge sort in O(n log n). Equal items are not inversions."""
    items = list(seq)
    buffer = items[:]
    inversions = 0
    width = 1
    n = len(items)
    # Bottom-up merge sort: no recursion limit on long inputs.
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if items[j] < items[i]:
                    buffer[k] = items[j]
                    inversions += mid - i  # items[j] jumps over every remaining left-half item
                    j += 1
                else:
                    buffer[k] = items[i]
                    i += 1
                k += 1
            buffer[k:hi] = items[i:mid] if i < mid else items[j:hi]
        items, buffer = buffer, items
        width *= 2
    return inversions


def inverted_pairs(seq: Sequence[Any]) -> list[tuple[int, int]]:
    """The positions ``(i, j)``, ``i < j``, with ``seq[i] > seq[j]`` (output-sized, so O(n^2) at worst)."""
    return [(i, j) for i in range(len(seq)) for j in range(i + 1, len(seq)) if seq[i] > seq[j]]


def shuffle_degree(seq: Sequence[Any]) -> float:
    """``Inv(seq) / C(n, 2)`` in [0, 1]. Undefined (ValueError) for fewer than two items: callers decide
    what no pair to compare means for them."""
    n = len(seq)
    if n < 2:
        raise ValueError(f"ShuffleD needs at least two items, got {n}")
    return count_inversions(seq) / comb(n, 2)


class _Fenwick:
    """Counts of still-available values ``0..n-1``; finds the k-th smallest available in O(log n)."""

    def __init__(self, n: int):
        self.n = n
        self.tree = [0] * (n + 1)
        for i in range(1, n + 1):
            self.tree[i] += 1
            parent = i + (i & -i)
            if parent <= n:
                self.tree[parent] += self.tree[i]
        self.top = 1 << max(0, n.bit_length() - 1) if n else 0

    def remove(self, value: int) -> None:
        i = value + 1
        while i <= self.n:
            self.tree[i] -= 1
            i += i & -i

    def kth(self, k: int) -> int:
        """The value of the k-th (0-based) smallest available item."""
        pos, step, remaining = 0, self.top, k + 1
        while step:
            nxt = pos + step
            if nxt <= self.n and self.tree[nxt] < remaining:
                pos = nxt
                remaining -= self.tree[nxt]
            step >>= 1
        return pos  # 1-based index pos + 1, i.e. 0-based value pos

    def smaller_available(self, value: int) -> int:
        """How many available values are < ``value``."""
        total, i = 0, value
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return total


def _check_code(code: Sequence[int]) -> None:
    n = len(code)
    for i, c in enumerate(code):
        if not isinstance(c, int) or not 0 <= c <= n - 1 - i:
            raise ValueError(f"invalid Lehmer code entry code[{i}]={c!r}; need 0 <= c <= {n - 1 - i}")


def from_lehmer_code(code: Sequence[int]) -> list[int]:
    """The permutation whose position ``i`` holds the ``code[i]``-th smallest item not yet used."""
    _check_code(code)
    available = _Fenwick(len(code))
    perm: list[int] = []
    for c in code:
        value = available.kth(c)
        available.remove(value)
        perm.append(value)
    return perm


def lehmer_code(perm: Sequence[int]) -> list[int]:
    """Inverse of :func:`from_lehmer_code`; ``perm`` must be a permutation of ``range(len(perm))``."""
    n = len(perm)
    if sorted(perm) != list(range(n)):
        raise ValueError("not a permutation of range(n)")
    available = _Fenwick(n)
    code: list[int] = []
    for value in perm:
        code.append(available.smaller_available(value))
        available.remove(value)
    return code


def random_lehmer_code(n: int, inversions: int, rng: random.Random) -> list[int]:
    """Algorithm 1 of the paper: start from the maximal code (the reversed order) and take one unit off a
    random entry until the entries sum to ``inversions``.

    The paper draws a position uniformly and skips it when its entry is already 0; drawing uniformly among
    the positive entries is the same distribution without the unbounded rejection loop.
    """
    max_inv = comb(n, 2)
    if n < 0 or not 0 <= inversions <= max_inv:
        raise ValueError(f"inversion count {inversions} outside [0, {max_inv}] for n={n}")
    code = [n - 1 - i for i in range(n)]
    positive = [i for i in range(n) if code[i] > 0]
    for _ in range(max_inv - inversions):
        slot = rng.randrange(len(positive))
        i = positive[slot]
        code[i] -= 1
        if code[i] == 0:
            positive[slot] = positive[-1]
            positive.pop()
    return code


def permutation_with_inversions(n: int, inversions: int, rng: random.Random) -> list[int]:
    """A random permutation of ``range(n)`` with exactly ``inversions`` inversions (Algorithm 1)."""
    return from_lehmer_code(random_lehmer_code(n, inversions, rng))


def inversion_range(n: int, low: str | float, high: str | float) -> tuple[int, int] | None:
    """The integer inversion counts ``k`` with ``low <= k / C(n, 2) <= high``, as ``(k_min, k_max)``, or None
    when no integer fits (short lists: e.g. n=3 has no count in [0.80, 0.90]). Bounds given as strings are
    compared exactly (``"0.55"`` is 11/20, not the nearest binary float)."""
    max_inv = comb(n, 2)
    if max_inv == 0:
        return None
    lo, hi = Fraction(str(low)), Fraction(str(high))
    k_min, k_max = ceil(lo * max_inv), floor(hi * max_inv)
    k_min, k_max = max(k_min, 0), min(k_max, max_inv)
    return (k_min, k_max) if k_min <= k_max else None
