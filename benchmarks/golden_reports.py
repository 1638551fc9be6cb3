"""Golden reports: every registered method, and the compositions a user reaches by default, over a fixed small
sample of the shared dev data, written as one deterministic JSON to compare byte for byte before and after a
refactor.

    PYTHONPATH=src python benchmarks/golden_reports.py --out /tmp/golden-before.json      # on the old tree
    PYTHONPATH=src python benchmarks/golden_reports.py --out /tmp/golden-after.json       # on the new one
    python benchmarks/golden_reports.py --compare /tmp/golden-before.json /tmp/golden-after.json

The items are the 3 shortest (distinct sources) of QAGS-CNNDM dev, SummEdits news and FINAL dev
(``../shared/data``). Sections:

- ``methods``: each configuration of :data:`CONFIGS` (every registered method with its defaults, the default
  composition ``halluscope check`` runs, each claim method verdict first) on each item, with two scripted fakes:
  ``logprobs`` answers with token log-probabilities at the verdict words (as the embedded model does), ``plain``
  without (as most remote endpoints do). The fake answers every stage with a valid reply built from the prompt
  (``tests/stage_fuzz.valid``, plus the verdict-first yes/no and its explanation), flipping the verdict for about
  one prompt in three by a hash of the prompt. The report JSON is kept with its call log, less wall-clock fields.
- ``cli``: the terminal and JSON output of ``halluscope check`` on the README's example files, with each fake.
- ``replays``: every recorded replay fixture (``tests/replays/``) replayed offline (as
  ``benchmarks/refactor_snapshot.py`` does).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's tests/ and benchmarks/ helpers; halluscope comes from PYTHONPATH
sys.path.insert(0, str(ROOT / "benchmarks"))

from refactor_snapshot import compare, replays_section, strip_volatile  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
ITEMS_PER_SET = 3
CLAIM_METHODS = ("dcr", "factscore", "probe", "dove")

EXPLANATION = {
    "reason": "The SOURCE does not say this.",
    "evidence": "",
    "contradicted": False,
    "fix": "A corrected claim.",
}


def configs() -> list[tuple[str, str | None, dict[str, Any]]]:
    """``(label, method, options)``: every registered method as it comes, the default composition (method None:
    what ``check`` runs when none is named), each claim method verdict first."""
    from halluscope.methods import list_methods

    out: list[tuple[str, str | None, dict[str, Any]]] = [("(default)", None, {})]
    out += [(name, name, {}) for name in list_methods()]
    out += [(f"{m} order=verdict_first", m, {"order": "verdict_first"}) for m in CLAIM_METHODS]
    out += [("(default) explain=false", None, {"explain": False})]
    return out


def dev_items(data: Path) -> list[dict[str, str]]:
    def rows(path: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (data / path).read_text().splitlines() if line.strip()]

    def shortest(found: list[dict[str, Any]], source: str, target: str, ident: str, name: str) -> list[dict[str, str]]:
        items = [{"set": name, "id": str(r[ident]), "source": r[source], "target": r[target]} for r in found]
        items.sort(key=lambda it: (len(it["source"]) + len(it["target"]), it["id"]))
        chosen: list[dict[str, str]] = []
        for it in items:
            if all(c["source"] != it["source"] for c in chosen):
                chosen.append(it)
        return chosen[:ITEMS_PER_SET]

    return (
        shortest(rows("qags/cnndm_dev.jsonl"), "source", "summary", "id", "qags")
        + shortest(rows("summedits/news.jsonl"), "doc", "summary", "id", "summedits")
        + shortest(rows("final/dev.jsonl"), "text", "summary", "doc_id", "final")
    )


def _flip(prompt: str) -> bool:
    return zlib.crc32(prompt.encode("utf-8", "surrogatepass")) % 3 == 0


def fake_model(with_logprobs: bool):
    """A FakeModel answering every stage validly (see the module docstring)."""
    from halluscope.llm import FakeModel
    from halluscope.llm.base import TokenLogprobs
    from halluscope.llm.fake import fake_tokens
    from tests.stage_fuzz import prompt_of, stage_of, valid_text

    def respond(messages: list[dict[str, str]]) -> str:
        prompt = prompt_of(messages)
        flip = _flip(prompt)
        if "Answer with one word: yes or no." in prompt:
            return "No" if flip else "Yes"
        if "was judged not supported by the SOURCE" in prompt:
            return json.dumps(EXPLANATION)
        stage = stage_of(messages)
        if stage is None:
            return "No stage recognised for this prompt."
        try:
            return valid_text(stage, prompt, flip)
        except KeyError:
            return f"No reply scripted for stage {stage}."

    words = {"yes": "no", "no": "yes", "true": "false", "false": "true", "pass": "fail", "fail": "pass"}

    def logprobs(reply: str) -> list[TokenLogprobs]:
        """Every verdict word gets its opposite as a candidate, P = 0.6 to 0.95 by a hash of the reply and its
        position; every other token is certain."""
        out = []
        for i, token in enumerate(fake_tokens(reply)):
            word = re.sub(r"[^A-Za-z]", "", token).lower()
            if word in words and token.strip().strip('"').lower() == word:
                p = 0.6 + (zlib.crc32(f"{reply}|{i}".encode()) % 36) / 100
                other = token.replace(token.strip().strip('"'), words[word])
                top = {token: math.log(p), other: math.log(1 - p)}
                out.append(TokenLogprobs(token=token, logprob=math.log(p), top=top))
            else:
                out.append(TokenLogprobs(token=token, logprob=0.0, top={token: 0.0}))
        return out

    return FakeModel(responder=respond, logprobs=logprobs if with_logprobs else None)


def build(method: str | None, options: dict[str, Any], llm: Any) -> Any:
    from halluscope.config import Config
    from halluscope.methods.named import build_method

    return build_method(method, config=Config(), llm=llm, options=options)


def methods_section(data: Path, only: set[str] | None = None) -> dict[str, Any]:
    from halluscope.llm import LLM

    items = dev_items(data)
    out: dict[str, Any] = {}
    for label, method, options in configs():
        if only is not None and label not in only:
            continue
        for fake in ("logprobs", "plain"):
            reports: dict[str, Any] = {}
            for item in items:
                key = f"{item['set']}/{item['id']}"
                try:
                    m = build(method, options, LLM(fake_model(fake == "logprobs"), cache=None))
                    report = m.check(item["source"], item["target"])
                    reports[key] = strip_volatile(report.model_dump(mode="json"))
                except Exception as exc:  # noqa: BLE001 - a crash is an observable output too
                    reports[key] = {"crash": f"{type(exc).__name__}: {exc}"}
            out[f"{label} [{fake}]"] = reports
        print(f"  methods: {label} done", file=sys.stderr, flush=True)
    return out


_ELAPSED = re.compile(r"\d+\.\d\ds$", re.M)


def cli_section() -> dict[str, Any]:
    """``halluscope check`` on the README's examples, terminal text and JSON, with each fake (the CLI's model
    built as the fake: ``halluscope.methods.base.get_llm`` replaced for the call)."""
    from typer.testing import CliRunner

    import halluscope.methods.base as base
    from halluscope.cli.main import app
    from halluscope.llm import LLM

    runs = {
        "check": ["check", "--source", "examples/source.txt", "--target", "examples/summary.txt"],
        "check --method dcr": [
            "check",
            "--source",
            "examples/source.txt",
            "--target",
            "examples/summary.txt",
            "--method",
            "dcr",
        ],
        "check -o explain=false": [
            "check",
            "--source",
            "examples/source.txt",
            "--target",
            "examples/summary.txt",
            "-o",
            "explain=false",
        ],
        "check --context --method gate": [
            "check",
            "--context",
            "examples/contexts.json",
            "--target",
            "examples/answer.txt",
            "--method",
            "gate",
        ],
    }
    original = base.get_llm
    out: dict[str, Any] = {}
    try:
        for fake in ("logprobs", "plain"):
            base.get_llm = lambda config, fake=fake: LLM(fake_model(fake == "logprobs"), cache=None)  # type: ignore[assignment]
            for label, args in runs.items():
                for fmt in ("text", "json"):
                    result = CliRunner().invoke(app, [*args, "--format", fmt], catch_exceptions=True)
                    text = result.output
                    if fmt == "json":
                        try:
                            text = strip_volatile(json.loads(text))
                        except ValueError:
                            pass
                    else:
                        text = _ELAPSED.sub("<elapsed>", text)
                    out[f"{label} --format {fmt} [{fake}]"] = {"exit": result.exit_code, "output": text}
    finally:
        base.get_llm = original  # type: ignore[assignment]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="where to write the golden JSON")
    parser.add_argument("--parts", default="methods,cli,replays", help="comma-separated: methods, cli, replays")
    parser.add_argument("--data", type=Path, default=DATA, help="the shared dev data (default ../shared/data)")
    parser.add_argument("--only", help="methods part: only these configurations (comma-separated labels)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        parser.error("--out is required (or --compare)")
    import halluscope

    print(f"halluscope from {Path(halluscope.__file__).parent}", file=sys.stderr)
    golden: dict[str, Any] = {}
    for part in [p.strip() for p in args.parts.split(",") if p.strip()]:
        if part == "methods":
            only = {s.strip() for s in args.only.split(",")} if args.only else None
            golden["methods"] = methods_section(args.data, only)
        elif part == "cli":
            golden["cli"] = cli_section()
        elif part == "replays":
            golden["replays"] = replays_section(args.data)
        else:
            parser.error(f"unknown part {part!r}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(golden, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
