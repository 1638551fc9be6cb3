"""Work over model output is linear: tag stripping searches each closer once, and hostile replies at the size
cap parse in a subprocess whose generous time limit a quadratic pass could never meet (no wall-clock bound
on the happy path: the limit only catches a regression that takes minutes)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from halluscope.text import tags
from halluscope.text.tags import strip_tag_blocks, strip_think, tag_blocks, tag_contents

_OLD_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "plain",
        "<think>a</think>b",
        "x<THINK>a</Think>y<think>b</think>z",
        "<think>open only",
        "<think>a<think>b</think>c</think>",
        "</think><think>",
        "<think></think><think>x",
        "a<think>\n\n</think>",
        "<think>1</think>" * 5 + "<think>tail",
    ],
)
def test_same_result_as_the_regex_it_replaces(text: str) -> None:
    assert strip_think(text) == _OLD_THINK.sub("", text)
    assert tag_contents(text, "think") == re.findall(r"<think>(.*?)</think>", text, re.S | re.I)


def test_each_opener_and_closer_is_searched_for_at_most_once(monkeypatch) -> None:
    searches = {"open": 0, "close": 0}

    class Counting:
        def __init__(self, pattern: re.Pattern[str], kind: str):
            self.pattern, self.kind = pattern, kind

        def search(self, text: str, pos: int = 0):
            searches[self.kind] += 1
            return self.pattern.search(text, pos)

    opener, closer = tags._markers("think")
    monkeypatch.setattr(tags, "_markers", lambda tag: (Counting(opener, "open"), Counting(closer, "close")))
    hostile = "<think>" * 28_000  # the reply that took 125 s: every opener scanned to the end
    assert strip_tag_blocks(hostile, "think") == hostile
    assert searches == {"open": 1, "close": 1}  # the first unclosed opener ends the search

    searches.update(open=0, close=0)
    assert list(tag_blocks("<think>a</think>" * 100 + "<think>", "think"))[-1].end == 1600
    assert searches == {"open": 101, "close": 101}


_HOSTILE_PARSE = textwrap.dedent("""
    from halluscope.text.parsing import MAX_REPLY_CHARS, ParseError, extract_json, parse_items_after_marker
    from halluscope.text.tags import strip_think
    from halluscope.methods.localize import parse_binary_verdict, parse_final_output
    from halluscope.generators.perturb.checks import parse_rewritten
    from halluscope.generators.inject import parse_marked_text

    replies = [
        "<think>" * 28_000,                       # 196 KB: quadratic took 125 s
        "```" + " " * (MAX_REPLY_CHARS - 10),     # a fence then whitespace: quadratic took ~3 min
        "<rewritten>" * 18_000,
        "<ins>" * 39_000,
        "{" * (MAX_REPLY_CHARS - 1),
    ]
    for reply in replies:
        assert len(reply) < MAX_REPLY_CHARS
        for parse in (extract_json, parse_items_after_marker, parse_binary_verdict, parse_final_output,
                      parse_rewritten, parse_marked_text):
            try:
                parse(reply)
            except (ParseError, ValueError):
                pass
    assert len(strip_think("<think>" * 1_000_000)) == 7_000_000  # 7 MB: hours if quadratic
    print("ok")
""")


def test_hostile_replies_at_the_cap_parse_in_linear_time() -> None:
    # Linear: well under a second each. Quadratic: minutes per reply, so the generous limit below cannot be met.
    done = subprocess.run([sys.executable, "-c", _HOSTILE_PARSE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


def _old_top_level_starts(text: str, limit: int = 200) -> list[int]:
    """The character-by-character scan the C-jumping one replaced (the definition it must match)."""
    starts: list[int] = []
    depth = 0
    in_string = escaped = False
    for i, ch in enumerate(text):
        if depth == 0:
            if ch in "{[":
                starts.append(i)
                if len(starts) >= limit:
                    break
                depth = 1
        elif in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    return starts


def test_top_level_starts_match_the_character_scan() -> None:
    import random

    from halluscope.text.parsing import _top_level_starts

    rng = random.Random(7)
    for _ in range(3000):
        text = "".join(rng.choice('{}[]"\\ab:,\n') for _ in range(rng.randint(0, 40)))
        assert _top_level_starts(text) == _old_top_level_starts(text), text
    example = 'x {"a": "\\"}", "b": [1]} [2]'
    assert _top_level_starts(example) == _old_top_level_starts(example) == [2, 25]
