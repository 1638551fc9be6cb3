"""Stage-by-stage fuzzing: a scripted model that answers every halluscope stage with a valid reply and
attacks only one named stage -- its first answer and its repair answer.

A request is recognised by its prompt template (the literal wording of every registered method's templates, read
from the templates themselves, so rewording a prompt does not break it; a reply type alone cannot tell apart the
templates that share one, e.g. dcr's paragraph and excerpt DCE or localize's filter and cot), the data it carries
is read back from the prompt's fences (tests/prompt_data.py), and a valid reply is built from it (one entry per
numbered unit, quotes copied from the source, ...). The attacked stage gets one reply of an attack class instead. Used
by ``tests/test_fuzz_stages.py`` (a fast subset) and by ``python benchmarks/fuzz_table.py --stage-by-stage``
(everything).

Counted per check: whether the attacked stage was reached (it must be: every earlier stage was answered validly),
scores that came from an attacked reply (a scored verdict whose calls include the attacked stage and no valid
alternative for it -- the single-unit call a batch falls back to --, or a report score with no such verdict
behind it; must be 0), and crashes (must be 0).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from string import Template
from typing import Any

from halluscope.llm import LLM, FakeModel
from halluscope.llm.replies import Reply
from halluscope.llm.structured import REPAIR_REQUEST
from halluscope.methods import get_method, list_methods, method_class
from halluscope.prompts import PromptTemplate
from halluscope.text import split_sentences
from tests.prompt_data import fenced

SOURCE = (
    "The city council approved the ferry project on Monday. Two thirds of the cost comes from a regional "
    "grant. The first boat will sail in March. The mayor said the route would cut commutes by an hour."
)
TARGET = (
    "The council approved the ferry project on Monday. The city pays for the whole project. "
    "The first boat sails in March."
)

# ------------------------------------------------------------------------------------------ recognising a stage

_REPAIR_PREFIX = REPAIR_REQUEST.split("{", 1)[0]
_ITEM = re.compile(r"^\s*(?:\[(\d+)\]|(\d+)\.)\s", re.M)


def _templates() -> dict[str, PromptTemplate]:
    found: dict[str, PromptTemplate] = {}
    for name in list_methods():
        for template in getattr(method_class(name), "prompts", ()):
            found.setdefault(template.name, template)
    return found


def _fragments(template: PromptTemplate) -> list[str]:
    """The literal wording of the template's user message (between placeholders), the long parts only."""
    parts = Template.pattern.split(template.user)
    literal = [p for p in parts[::5] if p]  # split yields a literal, then the pattern's 4 groups, per match
    return [p.strip() for p in literal if len(p.strip()) >= 25]


TEMPLATES = _templates()
FRAGMENTS = {name: _fragments(t) for name, t in TEMPLATES.items()}


def prompt_of(messages: list[dict[str, str]]) -> str:
    """The stage's own request: the last user message that is not a repair request."""
    users = [m["content"] for m in messages if m["role"] == "user"]
    for text in reversed(users):
        if not text.startswith(_REPAIR_PREFIX):
            return text
    return users[-1] if users else ""


def stage_of(messages: list[dict[str, str]]) -> str | None:
    """The name of the template the request was rendered from (the most specific one whose wording it holds)."""
    user = prompt_of(messages)
    best, best_len = None, 0
    for name, fragments in FRAGMENTS.items():
        if fragments and all(f in user for f in fragments):
            size = sum(len(f) for f in fragments)
            if size > best_len:
                best, best_len = name, size
    return best


def items(listing: str) -> list[tuple[int, str]]:
    """``(number, text)`` of a numbered listing ("1. text" or "[1] text" lines)."""
    out = []
    for line in listing.splitlines():
        m = _ITEM.match(line)
        if m:
            out.append((int(m.group(1) or m.group(2)), line[m.end() :].strip()))
    return out


# ------------------------------------------------------------------------------------------ valid replies


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _source_quote(user: str) -> str:
    source = fenced(user, "source", "") or SOURCE
    sentences = split_sentences(source)
    return sentences[0].text if sentences else source


CONSISTENT = "Consistent: the SOURCE states this."
INCONSISTENT = 'Inconsistent: the SOURCE does not say "this"; it says something else.'


def valid(stage: str, user: str, flip: bool = False) -> Any:  # noqa: C901 - one valid reply per stage prompt, a branch each
    """A valid reply for ``stage`` as a JSON value (or a string for text replies). ``flip`` gives the other
    verdict (to build "two verdicts" replies); stages without a verdict ignore it."""
    if stage == "geval":
        return {"reason": "The text follows the source.", "score": 1 if flip else 5}
    if stage == "geval_paper":  # G-Eval's score-only form: the reply is the score
        return "1" if flip else "5"
    if stage == "factscore_decompose":
        return {"facts": [{"sentence": n, "fact": t} for n, t in items(fenced(user, "sentences", ""))]}
    if stage in ("factscore_verify", "factscore_describe"):
        if stage == "factscore_verify":
            return {"supported": not flip}
        return (
            {"supported": False, "inconsistencies": ['The fact says "this", but the SOURCE says otherwise.']}
            if flip
            else {"supported": True, "inconsistencies": []}
        )
    if stage in ("factscore_verify_batch", "factscore_describe_batch"):
        describe = stage == "factscore_describe_batch"
        entries = []
        for n, _ in items(fenced(user, "facts", "")):
            entry: dict[str, Any] = {"id": n, "supported": not flip}
            if describe:
                entry["inconsistencies"] = ['The fact says "this", but the SOURCE says otherwise.'] if flip else []
            entries.append(entry)
        return {"results": entries}
    if stage == "factscore_dedup":
        return {"keep": [n for n, _ in items(fenced(user, "descriptions", ""))]}
    if stage == "probe_decompose":
        return {"claims": [{"segment": s.text, "claim": s.text} for s in split_sentences(fenced(user, "target", ""))]}
    if stage == "probe_find_evidence":  # flipped: nothing bears on the claim (it is then unsupported)
        return {"reasoning": "quoted", "evidence": [] if flip else [_source_quote(user)]}
    if stage == "probe_find_evidence_batch":
        return {
            "results": [
                {"id": n, "reasoning": "quoted", "evidence": [] if flip else [_source_quote(user)]}
                for n, _ in items(fenced(user, "claims", ""))
            ]
        }
    if stage == "probe_evaluate":
        return {"reasoning": "checked", "verdict": "FAIL" if flip else "PASS"}
    if stage == "probe_evaluate_batch":
        return {
            "results": [
                {"id": n, "reasoning": "checked", "verdict": "FAIL" if flip else "PASS"}
                for n, _ in items(fenced(user, "claims", ""))
            ]
        }
    if stage == "dove_decompose":
        return {"event_facts": [s.text for s in split_sentences(fenced(user, "target", ""))], "descriptive_facts": []}
    if stage == "dove_check":
        return {"reason": "checked", "evidence": "", "supported": not flip, "contradicted": flip}
    if stage == "dove_check_batch":
        return {
            "results": [
                {"id": n, "reason": "checked", "evidence": "", "supported": not flip, "contradicted": flip}
                for n, _ in items(fenced(user, "facts", ""))
            ]
        }
    if stage == "dove_sort":
        return {"order": [n for n, _ in items(fenced(user, "events", ""))]}
    if stage == "dcr_dce_sentence":
        listed = items(fenced(user, "sentences", ""))
        last = listed[-1][0] if listed else 0
        return {
            "sentences": [{"id": n, "reason": INCONSISTENT if (n == last) != flip else CONSISTENT} for n, _ in listed],
            "is_consistent": False,
        }
    if stage in ("dcr_dce_paragraph", "dcr_dce_excerpt"):
        return {"reason": INCONSISTENT if flip else CONSISTENT, "is_consistent": not flip}
    if stage == "dcr_dce_excerpt_batch":
        return {
            "results": [
                {"id": n, "reason": INCONSISTENT if flip else CONSISTENT, "is_consistent": not flip}
                for n, _ in items(fenced(user, "sentences", ""))
            ]
        }
    if stage == "dcr_amc":
        listed = items(fenced(user, "reasons", ""))
        marks = [1 if t.startswith("Consistent") else -1 for _, t in listed]
        return {"marks": [-m for m in marks] if flip else marks}
    if stage == "rai_sentence":
        return {
            "rewrites": [
                {"id": n, "improved_sentence": "The council approved the ferry project."}
                for n, _ in items(fenced(user, "flagged", ""))
            ]
        }
    if stage == "rai_paragraph":
        return {"improved_text": "The council approved the ferry project on Monday."}
    if stage == "localize_binary_filter":
        return "The TEXT says the city pays for everything.\nFinal answer: " + ("yes" if flip else "no")
    if stage.startswith("localize_"):
        answer = {
            "inconsistencies": []
            if flip
            else ['The text says "The city pays for the whole project", but the source says a grant pays two thirds.']
        }
        return f"Step by step: checked.\nFinal Output: {_dumps(answer)}" if "_cot" in stage else answer
    raise KeyError(f"no valid reply scripted for stage {stage!r}")


def valid_text(stage: str, user: str, flip: bool = False) -> str:
    value = valid(stage, user, flip)
    return value if isinstance(value, str) else _dumps(value)


# ------------------------------------------------------------------------------------------ attacks


def _reply_schema(stage: str) -> type[Reply] | None:
    template = TEMPLATES.get(stage)
    return template.reply if template is not None else None


def _dup_dumps(a: Any, b: Any) -> str:
    """``a`` as JSON text, each object also naming again (with ``b``'s value) every key whose value differs in
    ``b`` (objects, and lists of objects of the same length, are compared inside): the same key twice with two
    values."""
    if isinstance(a, dict):
        other = b if isinstance(b, dict) else {}
        pairs, again = [], []
        for k, v in a.items():
            w = other.get(k)
            inside = isinstance(v, dict) or (
                isinstance(v, list) and isinstance(w, list) and len(v) == len(w) and any(isinstance(x, dict) for x in v)
            )
            pairs.append(f"{_dumps(k)}: {_dup_dumps(v, w) if inside else _dumps(v)}")
            if k in other and not inside and w != v:
                again.append(f"{_dumps(k)}: {_dumps(w)}")
        return "{" + ", ".join(pairs + again) + "}"
    if isinstance(a, list):
        others = b if isinstance(b, list) and len(b) == len(a) else [None] * len(a)
        return "[" + ", ".join(_dup_dumps(x, y) for x, y in zip(a, others)) + "]"
    return _dumps(a)


_LOOKALIKE = str.maketrans({"s": "ſ", "i": "ı"})


def _lookalike_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k.translate(_LOOKALIKE): _lookalike_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_lookalike_keys(v) for v in value]
    return value


def _lookalike_labels(stage: str, user: str, rule_reasons: bool) -> list[str]:
    """Replies whose verdict is spelled with letters that fold onto ASCII ones (and, for JSON replies, whose keys
    are): never the label they resemble. DCR reasons ("Conſistent: ...") are labels only where the code reads
    them (``amc=rule``); otherwise the AMC call classifies them."""
    out: list[str] = []
    value = valid(stage, user)
    if isinstance(value, str):  # text verdicts: the binary filter's last line, cot's marker
        out += [
            value.replace("Final answer: no", "Final answer: nο"),  # Greek omicron
            value.replace("Final answer: no", "Fınal answer: no"),
            value.rsplit("\n", 1)[0] + "\nFinal answer: yeſ",
        ]
        if "Final Output:" in value:
            out.append(value.replace("Final Output:", "Fınal Output:"))
        return [o for o in out if o != value]
    out.append(_dumps(_lookalike_keys(value)))
    text = _dumps(value)
    for word, look in (("PASS", "PAſS"), ("PASS", "pasſ"), ("FAIL", "FAıL"), ("PASS", "ＰＡＳＳ")):
        if word in text:
            out.append(text.replace(f'"{word}"', f'"{look}"'))
    if rule_reasons:  # every reason's only verdict is its (look-alike) opening word
        out += _with_reasons(
            stage,
            user,
            (
                "Conſistent: the SOURCE states this.",
                "Inconſistent: the year differs.",
                "ᏟONSISTENT: stated.",
                "Consistent\u0131: stated.",
            ),
        )
    if stage in ("probe_evaluate", "probe_evaluate_batch"):
        out.append(_dumps(valid(stage, user, flip=True)).replace('"FAIL"', '"faıl"'))
    return out


NEGATION_REASONS = (
    "Nothing in the SOURCE supports this claim.",
    "Correction: the SOURCE says two thirds come from a grant.",
    "Consistent? No, the SOURCE says a grant pays.",
)
"""Negating reasons that ``amc=rule`` used to read as +1."""


HEDGED_REASONS = (
    "Is it consistent? No, the SOURCE says a grant pays.",
    "Consistent: yes. On reflection, inconsistent: the SOURCE names a grant.",
    "Consistent (except the funding: the SOURCE says a grant pays).",
    "Supported only partly: the SOURCE gives another year.",
    "Largely correct; the SOURCE actually says two thirds come from a grant.",
    "Correct apart from the funding: the SOURCE says a grant pays.",
    "Mostly consistent, yet the SOURCE gives another year.",
    "Consistent in part; the claim about the budget is unfounded.",
)
"""Hedged, corrected, restricted and negated reasons that ``amc=rule`` read as +1 on 22b0ee2."""


def _case_dup_dumps(a: Any, b: Any) -> str:
    """``a`` as JSON text, each object also naming, in another case (``Supported``, ``SCORE``), every key whose
    value differs in ``b``, with ``b``'s value: two keys that normalise alike."""
    if isinstance(a, dict):
        other = b if isinstance(b, dict) else {}
        pairs, again = [], []
        for k, v in a.items():
            w = other.get(k)
            inside = isinstance(v, dict) or (
                isinstance(v, list) and isinstance(w, list) and len(v) == len(w) and any(isinstance(x, dict) for x in v)
            )
            pairs.append(f"{_dumps(k)}: {_case_dup_dumps(v, w) if inside else _dumps(v)}")
            if k in other and not inside and w != v:
                again.append(f"{_dumps(k.capitalize() if k.capitalize() != k else k.upper())}: {_dumps(w)}")
        return "{" + ", ".join(pairs + again) + "}"
    if isinstance(a, list):
        others = b if isinstance(b, list) and len(b) == len(a) else [None] * len(a)
        return "[" + ", ".join(_case_dup_dumps(x, y) for x, y in zip(a, others)) + "]"
    return _dumps(a)


def _hidden_second_verdicts(stage: str, user: str) -> list[str]:
    """A valid reply with its opposite stated where a parser may not look: under a key differing only in case,
    nested under another key, in a list after the object, after 250 bracketed tokens (more than the 200 starts
    the parser once tried)."""
    a, b = valid(stage, user), valid(stage, user, flip=True)
    if a == b:
        return []
    filler = " " + "[note] " * 250
    if isinstance(a, str):
        return [f"{a}\n{b}", f"{a}{filler}\n{b}"]
    out = [_case_dup_dumps(a, b), f"{_dumps(a)}\n{_dumps([b])}", f"{_dumps(a)}{filler}{_dumps(b)}"]
    if isinstance(a, dict):
        out.append(_dumps({**a, "second_opinion": b}))
    return [o for o in out if o != _dumps(a)]


def _with_reasons(stage: str, user: str, reasons: Iterable[str]) -> list[str]:
    """DCE replies (any level) in which every reason is ``reason``, one reply per reason."""
    value = valid(stage, user)
    out = []
    for reason in reasons:
        if stage == "dcr_dce_sentence":
            out.append(
                _dumps(
                    {
                        "sentences": [{"id": e["id"], "reason": reason} for e in value["sentences"]],
                        "is_consistent": False,
                    }
                )
            )
        elif stage in ("dcr_dce_paragraph", "dcr_dce_excerpt"):
            out.append(_dumps({"reason": reason, "is_consistent": False}))
        elif stage == "dcr_dce_excerpt_batch":
            out.append(
                _dumps(
                    {"results": [{"id": e["id"], "reason": reason, "is_consistent": False} for e in value["results"]]}
                )
            )
    return out


def attack_replies(
    cls: str, stage: str, messages: list[dict[str, str]], garbage: dict[str, list[str]], rule_reasons: bool = False
) -> list[str]:
    """The replies of attack class ``cls`` for a request of ``stage`` (empty when the class does not apply).
    ``rule_reasons``: DCR's reasons are read by the rule (``amc=rule``), so reason wordings are attacks too."""
    user = prompt_of(messages)
    schema = _reply_schema(stage)
    example = getattr(schema, "example", None) if schema is not None else None
    if cls == "example_alone":
        if example is None:
            return []
        out = [_dumps(example)]
        field_name = getattr(schema, "bare_list_field", None)
        if field_name:  # a batch: the example's entries, then valid entries for the other units
            shown = example[field_name]
            ids = {e.get("id") for e in shown}
            extra = [e for e in valid(stage, user)[field_name] if e.get("id") not in ids]
            out.append(_dumps({field_name: shown + extra}))
        return out
    if cls == "example_in_format":
        return [schema.format_instructions()] if example is not None else []
    if cls == "prompt_echo":
        return ["\n\n".join(m["content"] for m in messages if m["role"] in ("system", "user"))]
    if cls == "two_verdicts":
        a, b = valid_text(stage, user), valid_text(stage, user, flip=True)
        if a == b:
            return []
        return [
            f"{a}\nOn second thought:\n{b}",
            f"{b}\n\nWait, correcting myself: {a}",
            f"```json\n{a}\n```\n```json\n{b}\n```",
        ]
    if cls == "duplicate_keys":
        a, b = valid(stage, user), valid(stage, user, flip=True)
        if isinstance(a, str) or a == b:
            return []
        dup = _dup_dumps(a, b)
        return [dup, dup.replace("true", "True").replace("false", "False")]  # the second needs syntax repair
    if cls == "lookalike_labels":
        return _lookalike_labels(stage, user, rule_reasons)
    if cls == "amc_rule_negations":
        return _with_reasons(stage, user, NEGATION_REASONS) if rule_reasons else []
    if cls == "amc_rule_hedges":
        return _with_reasons(stage, user, HEDGED_REASONS) if rule_reasons else []
    if cls == "hidden_second_verdict":
        return _hidden_second_verdicts(stage, user)
    return list(garbage.get(cls, ()))


STRUCTURAL_CLASSES = (
    "example_alone",
    "example_in_format",
    "prompt_echo",
    "two_verdicts",
    "duplicate_keys",
    "lookalike_labels",
    "hidden_second_verdict",
)
"""The structural attack classes (``hidden_second_verdict``: keys differing in case, a nested or listed second
verdict, one after 250 bracketed tokens). ``RULE_CLASSES`` apply to ``dcr -o amc=rule`` only."""

RULE_CLASSES = ("amc_rule_negations", "amc_rule_hedges")
"""Reason wordings read by ``amc=rule``: negations, and hedged, corrected or restricted positive openers."""

ALTERNATIVES = {
    "factscore_verify_batch": {"factscore_verify"},
    "factscore_describe_batch": {"factscore_describe"},
    "probe_find_evidence_batch": {"probe_find_evidence"},
    "probe_evaluate_batch": {"probe_evaluate"},
    "dove_check_batch": {"dove_check"},
    "dcr_dce_excerpt_batch": {"dcr_dce_excerpt"},
}
"""The single-unit stage a batch stage falls back to: a verdict decided there is a real one."""

VERDICT_STAGES = frozenset(
    {
        "geval",
        "geval_paper",
        "factscore_verify",
        "factscore_describe",
        "factscore_verify_batch",
        "factscore_describe_batch",
        "probe_find_evidence",
        "probe_find_evidence_batch",
        "probe_evaluate",
        "probe_evaluate_batch",
        "dove_check",
        "dove_check_batch",
        "dcr_dce_sentence",
        "dcr_dce_paragraph",
        "dcr_dce_excerpt",
        "dcr_dce_excerpt_batch",
        "dcr_amc",
        "localize_binary_filter",
    }
) | frozenset(n for n in TEMPLATES if n.startswith("localize_"))
"""Stages whose reply carries a verdict (a label, a score, a mark, a list of inconsistencies, or the evidence a
verdict rests on). Decomposition, ordering, de-duplication and rewriting stages are answered validly only."""

# ------------------------------------------------------------------------------------------ running

STAGE_CONFIGS: list[tuple[str, dict]] = [
    ("geval", {}),
    ("geval", {"prompt": "paper"}),
    ("localize", {"style": "zero_shot"}),
    ("localize", {"style": "few_shot"}),
    ("localize", {"style": "cot"}),
    ("localize", {"style": "zero_shot", "filter": "self"}),
    ("localize", {"style": "cot", "filter": "self", "hint": True}),
    ("factscore", {}),
    ("factscore", {"describe": False}),
    ("factscore", {"batch_size": 3}),
    ("factscore", {"describe": False, "batch_size": 3}),
    ("dove", {}),
    ("dove", {"batch_size": 2}),
    ("dove", {"decomposer": "sentences"}),
    ("dcr", {}),
    ("dcr", {"amc": "rule"}),
    ("dcr", {"level": "paragraph"}),
    ("dcr", {"level": "paragraph", "amc": "rule"}),
    ("dcr", {"retrieval": "always", "retriever": "bm25"}),
    ("dcr", {"retrieval": "always", "retriever": "bm25", "batch_size": 3}),
    ("dcr", {"retrieval": "always", "retriever": "bm25", "batch_size": 3, "amc": "rule"}),
    ("probe", {}),
    ("probe", {"batch_size": 3}),
    ("improve", {"rounds": 1}),
]
"""Every LLM method, single and ``batch_size`` > 1, every level and AMC mode, retrieval (BM25: offline)."""


def config_label(method: str, options: dict) -> str:
    return method + "".join(f" {k}={v}" for k, v in options.items())


@dataclass
class StageScript:
    """The responder: every request answered validly, except ``attacked`` requests, which get ``attack`` (the
    same reply for the first answer and the repair). Records the stages it was asked for."""

    attacked: str | None = None
    attack: str | Callable[[list[dict[str, str]]], str] = ""
    asked: Counter = field(default_factory=Counter)
    unknown: list[str] = field(default_factory=list)

    def __call__(self, messages: list[dict[str, str]]) -> str:
        stage = stage_of(messages)
        if stage is None:
            self.unknown.append(prompt_of(messages)[:80])
            raise KeyError("unrecognised request: " + prompt_of(messages)[:80])
        self.asked[stage] += 1
        if stage == self.attacked:
            return self.attack(messages) if callable(self.attack) else self.attack
        return valid_text(stage, prompt_of(messages))


def run_check(method: str, options: dict, script: StageScript):
    llm = LLM(FakeModel(responder=script), cache=None)
    return get_method(method, llm=llm, **options).check(SOURCE, TARGET)


def verdict_stages_reached(method: str, options: dict) -> list[str]:
    """The verdict-carrying stages a check asks when every reply is valid (in the order first asked)."""
    script = StageScript()
    report = run_check(method, options, script)
    assert not script.unknown, script.unknown
    assert report.score is not None, f"{method} {options}: the all-valid run is unscored: {report.unscored_reason}"
    return [s for s in script.asked if s in VERDICT_STAGES]


def scores_from_attack(report, attacked: str, negations: bool = False) -> int:
    """Scores that rest on an attacked reply: scored verdicts whose calls (the report's when the verdict keeps none
    of its own) include the attacked stage and none of its valid alternatives (with ``negations``: only those read
    as consistent, +1), or else one for a report scored while no verdict is a real one (methods whose report is the
    verdict: geval, localize)."""
    from_attack = 0
    legit = 0
    for verdict in report.verdicts:
        if verdict.label == "unscored":
            continue
        # a verdict decided by a call shared with others (DCR's one DCE call) keeps it on the report only
        stages = {stage_of(c.messages) for c in (verdict.calls or report.calls)}
        if attacked in stages and not stages & ALTERNATIVES.get(attacked, set()):
            if not negations or verdict.label == "supported" or (verdict.score or 0) > 0:
                from_attack += 1
                continue
        legit += 1
    if report.score is not None and legit == 0 and from_attack == 0:
        from_attack = 1  # a score with no real verdict behind it (geval, localize: the report is the verdict)
    return from_attack


def fuzz_stage(
    method: str,
    options: dict,
    stage: str,
    classes: Iterable[str],
    garbage: dict[str, list[str]],
    row: Counter,
    on_crash: Callable[[str], None] | None = None,
) -> None:
    """Every reply of every class in ``classes`` against ``stage`` of one method configuration, counted in
    ``row``: checks, reached, attacked_replies, scores_from_attack, crashes."""
    negations = False
    rule_reasons = options.get("amc") == "rule"
    for cls in classes:
        probe_messages: list[list[dict[str, str]]] = []

        def sample(messages, probe_messages=probe_messages):
            probe_messages.append(messages)
            return valid_text(stage, prompt_of(messages))

        # the replies of a class can depend on the request (counts, numbering): build them from a first request
        first = StageScript(attacked=stage, attack=sample)
        run_check(method, options, first)
        if not probe_messages:
            row["not_reached_in_valid_run"] += 1
            continue
        replies = attack_replies(cls, stage, probe_messages[0], garbage, rule_reasons)
        negations = cls in RULE_CLASSES
        for index in range(len(replies)):

            def attack(messages, index=index, cls=cls, replies=replies):
                built = attack_replies(cls, stage, messages, garbage, rule_reasons)
                return built[index] if index < len(built) else replies[index]

            script = StageScript(attacked=stage, attack=attack)
            row["checks"] += 1
            try:
                report = run_check(method, options, script)
            except Exception as exc:  # counted, never hidden
                row["crashes"] += 1
                if on_crash is not None:
                    on_crash(f"{method} {options} {stage} {cls}#{index}: {type(exc).__name__}: {exc}")
                continue
            row["reached"] += script.asked[stage] > 0
            row["attacked_replies"] += script.asked[stage]
            scored = scores_from_attack(report, stage, negations)
            row["scores_from_attack"] += scored
            row[f"class:{cls}"] += 1
            row[f"scored:{cls}"] += scored
