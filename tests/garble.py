"""Garbled, truncated and non-JSON model replies for fuzzing parsers (deterministic by seed)."""

from __future__ import annotations

import json
import random

_SEEDS = [
    '{"reason": "The sentence is supported.", "score": 4}',
    '{"claims": [{"text": "A met B.", "label": "supported"}], "verdict": "PASS"}',
    '[{"sentence_id": 1, "reason": "fine", "is_consistent": true}]',
    'Here is my answer:\n```json\n{"facts": ["a", "b"], "events": []}\n```',
    "1. The summary says X but the source says Y.\n2. Z is not mentioned.",
    "Final answer: None",
    "Score: 3/5",
    "PASS",
    "FAIL: the excerpt does not mention the date.",
]
_JUNK = [
    "",
    " ",
    "\n\n",
    "null",
    "true",
    "0",
    "[]",
    "{}",
    "{{{{",
    "]]]",
    '"',
    "```",
    "```json",
    "<think>",
    "NaN",
    "None",
    "I cannot help with that.",
    "\x00\x01",
    "🙂" * 5,
    "{'single': 'quotes'}",
    "[1, 2, 3]",
    '{"score": "five"}',
    '{"score": 99}',
    '{"a": {"b": {"c": ',
    "Sure! " * 20,
]


def garbled_replies(n: int = 1000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out: list[str] = list(_JUNK)
    while len(out) < n:
        base = rng.choice(_SEEDS + _JUNK)
        op = rng.randrange(8)
        if op == 0 and base:
            base = base[: rng.randrange(len(base) + 1)]  # truncate
        elif op == 1 and base:
            i = rng.randrange(len(base))
            base = base[:i] + rng.choice('{}[]",:\\\n`') + base[i:]  # inject a stray character
        elif op == 2 and base:
            i = rng.randrange(len(base))
            base = base[:i] + base[i + 1 :]  # drop a character
        elif op == 3:
            base = "Sure, here you go. " + base + " Hope this helps!"
        elif op == 4:
            base = json.dumps({"unexpected": base, "n": rng.randrange(100)})
        elif op == 5:
            base = base.upper()
        elif op == 6:
            base = "".join(rng.choice('abc{}[]:," \n0123456789') for _ in range(rng.randrange(60)))
        out.append(base)
    return out[:n]
