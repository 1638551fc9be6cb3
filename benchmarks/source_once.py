"""Prompt tokens the embedded model evaluates per item, before and after source-once prompts.

    # after (this tree)
    PYTHONPATH=src python benchmarks/source_once.py --replay --items 1 --label after --out after.json
    # before: the same script against the old code (prompts keyed by every value, format last)
    mkdir -p /tmp/old && git archive 842d343 src | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old/src python benchmarks/source_once.py --replay --items 1 --label before --out before.json
    # the table
    python benchmarks/source_once.py --compare before.json after.json

``--replay`` (fast, deterministic): the replies come from a scripted responder (valid JSON: every target sentence
a fact, every fact supported, the best-matching source sentence as evidence), so the old and the new code make
the same calls; each call's prompt is still evaluated by the real embedded model (a 1-token reply), so prompt
tokens, KV-cache reuse and prefill time are measured, not estimated. Without it, the model writes every reply.

Runs ``dcr``, ``factscore``, ``probe`` and ``dove`` on built-in items (a ~200-token source, a target of 6 claims)
with the embedded llama.cpp model, response cache off. For every model call it records the prompt tokens and how
many of them llama.cpp took from its KV cache instead of evaluating (the longest common prefix of the token ids
held before the call and the new prompt, measured by wrapping ``Llama.create_chat_completion``, so the old code
is measured the same way although it does not report it). Prints (and writes) per method: calls, prompt tokens,
prompt tokens evaluated and wall seconds per item. Token counts are deterministic for a given model and reply;
wall times depend on the machine's load (compare them as ratios from one session).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

ITEMS = [
    (
        "The Harbour Line ferry opened in March 2021 after three years of construction. It crosses the bay every "
        "30 minutes between 6 am and midnight, and the crossing takes twelve minutes. The project cost 48 million "
        "euros: two thirds came from a regional grant and the city paid the rest from its own budget. The line "
        "uses four electric boats built in Gdansk, each carrying 120 passengers and 20 bicycles. In its first year "
        "the line carried 1.2 million people, twice the number the planners expected. Because of the demand, the "
        "council voted in January 2023 to buy a fifth boat, which is due to enter service next spring.",
        "The Harbour Line ferry opened in March 2021. It crosses the bay every 15 minutes. The city paid for the "
        "whole project from its own budget. Its four electric boats were built in Gdansk and carry 120 passengers "
        "each. In its first year the line carried 1.2 million people. The council has decided to buy two more "
        "boats.",
    ),
    (
        "Marta Keller founded the Linden bakery in Graz in 1994 with a loan from her uncle. For its first ten "
        "years it sold only rye bread, baked in a wood-fired oven that Keller had bought from a closing bakery in "
        "Vienna. In 2005 her son Jonas joined the business and added pastries and a small cafe. The bakery now "
        "employs 23 people and opens every day except Monday. In 2019 it won the regional prize for organic "
        "baking, and last year it opened a second shop near the main station.",
        "Marta Keller founded the Linden bakery in Graz in 1994. At first it sold only rye bread from a wood-fired "
        "oven bought in Salzburg. Her son Jonas joined in 2005 and added pastries. The bakery employs 23 people. "
        "It is open every day of the week. It won a national prize for organic baking in 2019.",
    ),
]

METHODS = ("dcr", "factscore", "probe", "dove")


class PrefixMeter:
    """Wraps ``Llama.create_chat_completion``: per call, prompt tokens and those reused from the KV cache."""

    def __init__(self) -> None:
        self.calls = 0
        self.prompt = 0
        self.reused = 0

    def install(self) -> None:
        from llama_cpp import Llama

        original = Llama.create_chat_completion
        meter = self

        def wrapped(llama, *args, **kwargs):
            held = [int(t) for t in llama.input_ids[: llama.n_tokens]]
            out = original(llama, *args, **kwargs)
            n = int((out.get("usage") or {}).get("prompt_tokens") or 0)
            prompt = [int(t) for t in llama.input_ids[:n]]
            common = 0
            for a, b in zip(held, prompt):
                if a != b:
                    break
                common += 1
            if prompt and common == len(prompt):
                common -= 1  # llama.cpp evaluates the last prompt token again for fresh logits
            meter.calls += 1
            meter.prompt += n
            meter.reused += common
            return out

        Llama.create_chat_completion = wrapped

    def snapshot(self) -> tuple[int, int, int]:
        return self.calls, self.prompt, self.reused


_FENCED = re.compile(r"<([a-z0-9_]+)_([0-9a-f]{10})>\n(.*?)\n</\1_\2>", re.S)


def _fenced(user: str, name: str) -> str:
    return next(text for tag, _, text in _FENCED.findall(user) if tag == name)


def _lines(user: str, name: str) -> list[str]:
    return [re.sub(r"^\d+\.\s*", "", line) for line in _fenced(user, name).splitlines() if line.strip()]


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


def _closest(claim: str, source: str) -> str:
    words = set(re.findall(r"\w+", claim.lower()))
    return max(_sentences(source), key=lambda s: len(words & set(re.findall(r"\w+", s.lower()))))


def scripted_reply(messages: list[dict[str, str]]) -> str:
    """A valid reply for every step of the four methods (same wording matched in the old and the new prompts)."""
    user = next(m["content"] for m in messages if m["role"] == "user")
    source = next((t for tag, _, t in _FENCED.findall(user) if tag == "source"), ITEMS[0][0])
    if "Split the TEXT below" in user:
        return json.dumps({"event_facts": _sentences(_fenced(user, "target")), "descriptive_facts": []})
    if "Order the events" in user:
        return json.dumps({"order": list(range(1, len(_lines(user, "events")) + 1))})
    if "Is the FACT true" in user:
        return json.dumps({"reason": "stated", "evidence": "", "supported": True})
    if "into atomic facts" in user:
        return json.dumps({"facts": [{"sentence": i, "fact": f} for i, f in enumerate(_lines(user, "sentences"), 1)]})
    if "Is the FACT supported" in user:
        return json.dumps({"supported": True, "inconsistencies": []})
    if "List every assertion" in user:
        return json.dumps({"claims": [{"segment": s, "claim": s} for s in _sentences(_fenced(user, "target"))]})
    if "Find the passages" in user:
        return json.dumps({"reasoning": "", "evidence": [_closest(_fenced(user, "claim"), source)]})
    if "EVIDENCE EXCERPT, on its own" in user:
        return json.dumps({"reasoning": "ok", "verdict": "PASS"})
    if "one sentence at a time" in user:
        n = len(_lines(user, "sentences"))
        return json.dumps({"sentences": [{"id": i, "reason": "Consistent: stated."} for i in range(1, n + 1)],
                           "is_consistent": True})
    if "ASSESSMENTS" in user:
        return json.dumps({"marks": [1] * int(re.search(r"There are (\d+) assessments", user).group(1))})
    raise ValueError(f"no scripted reply for: {user[:80]!r}")


class ReplayModel:
    """Scripted replies; every prompt still prefilled by the real embedded model (1-token reply) for the meter."""

    max_concurrency = 1
    prefix_affinity = True  # the new code's client schedules by prefix, as for the embedded model (old: ignored)

    def __init__(self, embedded) -> None:
        self.embedded = embedded
        self.name = f"replay:{embedded.name}"
        self.context_window = embedded.context_window

    def count_tokens(self, text: str):
        return self.embedded.count_tokens(text)

    async def generate(self, messages, params):
        from halluscope.llm.base import Completion
        from halluscope.records import Usage

        await self.embedded.generate(messages, params.model_copy(update={"max_tokens": 1, "json_schema": None,
                                                                         "json_mode": False}))
        return Completion(text=scripted_reply(messages), model=self.name, usage=Usage(calls=1))


def run(args: argparse.Namespace) -> dict:
    from halluscope.config import Config
    from halluscope.llm import get_llm
    from halluscope.methods import get_method

    meter = PrefixMeter()
    meter.install()
    config = Config(model=args.model, cache=False, max_tokens=args.max_tokens, seed=0)
    llm = get_llm(config)
    if args.replay:
        from halluscope.llm import LLM

        llm = LLM(ReplayModel(llm.api), cache=None, default_params=llm.default_params)
    items = ITEMS[: args.items]
    results: dict = {"label": args.label, "model": args.model, "replay": args.replay, "max_tokens": args.max_tokens, "items": len(items),
                     "halluscope": str(Path(sys.modules["halluscope"].__file__).parent),
                     "load_avg_1m": os.getloadavg()[0], "methods": {}}
    for name in args.methods.split(","):
        method = get_method(name, llm=llm, config=config)
        calls0, prompt0, reused0 = meter.snapshot()
        started = time.perf_counter()
        scored = 0
        for source, target in items:
            report = method.check(source, target)
            scored += report.score is not None
            print(f"  {name}: score {report.score} ({report.unscored_reason or 'scored'})", file=sys.stderr)
        wall = time.perf_counter() - started
        calls1, prompt1, reused1 = meter.snapshot()
        n = len(items)
        prompt, reused = prompt1 - prompt0, reused1 - reused0
        results["methods"][name] = {
            "calls_per_item": round((calls1 - calls0) / n, 2), "prompt_tokens_per_item": round(prompt / n, 1),
            "reused_per_item": round(reused / n, 1), "evaluated_per_item": round((prompt - reused) / n, 1),
            "wall_s_per_item": round(wall / n, 1), "scored": scored}
        print(json.dumps({name: results["methods"][name]}), file=sys.stderr)
        if args.out:  # after every method: a run cut short keeps what it measured
            args.out.write_text(json.dumps(results, indent=2) + "\n")
    results["load_avg_1m_end"] = os.getloadavg()[0]
    return results


def compare(before_path: str, after_path: str) -> str:
    before, after = (json.loads(Path(p).read_text()) for p in (before_path, after_path))
    mode = "scripted replies, real prefill" if after.get("replay") else f"model replies, max_tokens {after['max_tokens']}"
    lines = [f"model `{after['model']}`, {after['items']} item(s), {mode}", "",
             "| method | calls/item before → after | prompt tokens evaluated/item before → after | ratio "
             "| wall s/item before → after | wall ratio |",
             "|---|---|---|---|---|---|"]
    for name, a in after["methods"].items():
        b = before["methods"].get(name)
        if b is None:
            continue
        ratio = a["evaluated_per_item"] / b["evaluated_per_item"] if b["evaluated_per_item"] else float("nan")
        wall = a["wall_s_per_item"] / b["wall_s_per_item"] if b["wall_s_per_item"] else float("nan")
        lines.append(f"| {name} | {b['calls_per_item']} → {a['calls_per_item']} | {b['evaluated_per_item']:g} → "
                     f"{a['evaluated_per_item']:g} (of {a['prompt_tokens_per_item']:g} sent) | {ratio:.2f} | "
                     f"{b['wall_s_per_item']:g} → {a['wall_s_per_item']:g} | {wall:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded:smollm2", help="embedded:NAME or embedded:/path/model.gguf")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--items", type=int, default=len(ITEMS))
    parser.add_argument("--max-tokens", type=int, default=384, help="reply cap per call (keeps the run short)")
    parser.add_argument("--label", default="")
    parser.add_argument("--replay", action="store_true", help="scripted replies, real prefill (see above)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        print(compare(*args.compare))
        return
    results = run(args)
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
