"""Prompt internals in what users read: the one check between a method's findings and the reader.

A model that hands its prompt back (small models do; an echo is the extreme case) puts halluscope's own markup
into a reason, a fix or a quote: the data fence tags (``<claim_d9e042ef58>…</claim_d9e042ef58>``,
:mod:`halluscope.text.fence`), the notice that explains them, the prompt's section headers (``SOURCE:``,
``CLAIM:`` on a line of their own), its reply-format instructions, or a format slot (``<corrected sentence>``,
:mod:`halluscope.text.placeholders`). None of that may reach a reader:

* a reason (a verdict's ``reason``, a finding's ``description``) has the markup stripped;
* a fix that holds markup, or that only repeats the flagged text, is not shown: ``fix`` becomes None and
  ``fix_rejected`` says why (the fix is not a correction halluscope can stand behind);
* a quote that holds markup and lies nowhere in the source is dropped from the evidence (a quote located in the
  source is the caller's own text and is never touched).

:func:`clean_report` applies this to every verdict and finding of a report; every report passes through it when it
is finished (:func:`halluscope.text.redact.redact_report`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from halluscope.text.placeholders import is_placeholder, normalized

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.records import Evidence, Finding, Report, Verdict

FENCE_TAG = re.compile(r"</?[a-z0-9_]+_[0-9a-f]{10}>")
"""An opening or closing data fence tag (:func:`halluscope.text.fence.fence`): the key is absent from the data, so
such a tag in a reply comes from the prompt."""

_NOTICE_START = "Material to examine is given between tags"
_NOTICE_END = "judge it only as the text it is."
_FORMAT = re.compile(r"Answer with one JSON object and nothing before or after it\. Its fields:")
_HEADER = re.compile(r"(?m)^[ \t]*[A-Z][A-Z ]{1,30}:[ \t]*$")
_SLOT = re.compile(r"<[a-z]+(?:[ _-][a-z]+){1,8}>")
"""A format slot left in a text: ``<corrected sentence>``, ``<atomic_fact>`` (lower-case words in angle brackets; a
single word such as ``<b>`` may be the caller's own markup, and counts only as a whole value)."""


def markup_found(text: str) -> str | None:
    """What prompt markup ``text`` holds (a short name), or None when it holds none."""
    if FENCE_TAG.search(text):
        return "a data fence tag"
    if _NOTICE_START in text:
        return "the prompt's data notice"
    if _FORMAT.search(text):
        return "the prompt's reply-format instructions"
    if _HEADER.search(text):
        return "a prompt section header"
    if _SLOT.search(text) or (text.strip() and is_placeholder(text)):
        return "a format placeholder"
    return None


def _without_notice(text: str) -> str:
    """``text`` without copies of the data notice (:func:`halluscope.text.fence.data_notice`), each from its first
    words to its last (to the end of the text when it is cut off), in one pass."""
    parts: list[str] = []
    pos = 0
    while (start := text.find(_NOTICE_START, pos)) >= 0:
        parts.append(text[pos:start])
        end = text.find(_NOTICE_END, start)
        pos = len(text) if end < 0 else end + len(_NOTICE_END)
    parts.append(text[pos:])
    return " ".join(parts)


def strip_markup(text: str) -> str:
    """``text`` without prompt markup: fence tags, the data notice, the format instructions, section-header lines
    and format slots removed, whitespace collapsed; "" when nothing but markup (or a placeholder) was left."""
    text = _without_notice(text)
    for pattern in (_FORMAT, FENCE_TAG, _HEADER, _SLOT):
        text = pattern.sub(" ", text)
    text = " ".join(text.split())
    return "" if is_placeholder(text) else text


def shown_reason(reason: str) -> str:
    """``reason`` as a reader sees it: unchanged when it holds no markup, else stripped of it (a note saying so
    when nothing else was left)."""
    if not reason or markup_found(reason) is None:
        return reason
    return strip_markup(reason) or "the model's reason held only prompt markup"


def fix_problem(fix: str, flagged: list[str]) -> str | None:
    """Why ``fix`` must not be shown (it holds markup, or it only repeats one of the ``flagged`` texts), or None."""
    found = markup_found(fix)
    if found is not None:
        return f"not shown: the suggested fix held {found}"
    if any(normalized(fix) == normalized(text) for text in flagged if text.strip()):
        return "not shown: the suggested fix repeats the flagged text"
    return None


def _evidence(items: list[Evidence]) -> list[Evidence]:
    return [e for e in items if e.span is not None or markup_found(e.text) is None]


def _fix(fix: str | None, flagged: list[str]) -> dict[str, Any]:
    if not fix:
        return {}
    problem = fix_problem(fix, flagged)
    if problem is None:
        return {}
    return {"fix": None, "fix_rejected": problem, "fix_probability": None, "fix_verified": False}


def clean_verdict(verdict: Verdict) -> Verdict:
    """``verdict`` with its reason stripped of markup, a fix with markup (or repeating its claim) dropped, and
    unlocated quotes with markup dropped; the same object when nothing changes."""
    update: dict[str, Any] = {}
    if (reason := shown_reason(verdict.reason)) != verdict.reason:
        update["reason"] = reason
    update.update(_fix(verdict.fix, [verdict.claim.text]))
    evidence = _evidence(verdict.evidence)
    if len(evidence) != len(verdict.evidence):
        update["evidence"] = evidence
    return verdict.model_copy(update=update) if update else verdict


def clean_finding(finding: Finding, flagged: list[str]) -> Finding:
    """``finding`` cleaned as :func:`clean_verdict` cleans a verdict; ``flagged``: the texts of its claims."""
    update: dict[str, Any] = {}
    if markup_found(finding.description):
        update["description"] = strip_markup(finding.description) or "The source does not support this text."
    update.update(_fix(finding.fix, flagged))
    evidence = _evidence(finding.evidence)
    if len(evidence) != len(finding.evidence):
        update["evidence"] = evidence
    return finding.model_copy(update=update) if update else finding


def clean_report(report: Report) -> Report:
    """``report`` with every verdict and finding cleaned (see the module docstring); the same object when clean."""
    claims = {c.id: c.text for c in report.claims if c.id}
    claims.update({v.claim.id: v.claim.text for v in report.verdicts if v.claim.id})
    verdicts = [clean_verdict(v) for v in report.verdicts]
    findings = [clean_finding(f, [claims[i] for i in f.claim_ids if i in claims]) for f in report.findings]
    if all(a is b for a, b in zip(verdicts, report.verdicts)) and all(
        a is b for a, b in zip(findings, report.findings)
    ):
        return report
    return report.model_copy(update={"verdicts": verdicts, "findings": findings})
