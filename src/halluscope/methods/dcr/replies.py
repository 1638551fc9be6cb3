"""DCE's and AMC's declared replies and their defensive parsers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from halluscope.llm.replies import Reply
from halluscope.methods.batching import batch_reply, numbered_entry
from halluscope.records import Claim
from halluscope.text import ParseError
from halluscope.text.placeholders import is_placeholder, shown_strings


class SentenceReason(BaseModel):
    """One DCE reason: about the numbered sentence ``id``, or (``id`` null) about the text as a whole."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    id: int | None = Field(
        description="the number of the sentence the reason is about; null only for a remark about the TEXT as a whole"
    )
    reason: str = Field(description="'Consistent:' or 'Inconsistent:', then why")


class DceReply(Reply):
    """Sentence-level DCE: one reason per numbered sentence, and the model's overall verdict (recorded, never
    used in the score)."""

    sentences: list[SentenceReason] = Field(description="one entry per numbered sentence, in order")
    is_consistent: bool = Field(description="true if every sentence is consistent, otherwise false")
    example: ClassVar[dict[str, Any] | None] = {
        "sentences": [
            {"id": 1, "reason": "Consistent: the SOURCE says the museum opened in 1998."},
            {"id": 2, "reason": 'Inconsistent: "in Lyon" is wrong; the SOURCE says the museum is in Paris.'},
        ],
        "is_consistent": False,
    }


class DceSingleReply(Reply):
    """Paragraph-level DCE, and one sentence against one source excerpt: one reason and the verdict."""

    reason: str = Field(description="starts with 'Consistent:' or 'Inconsistent:', then explains")
    is_consistent: bool = Field(description="true if it is consistent, otherwise false")


DceExcerptEntry = numbered_entry(
    DceSingleReply,
    "sentence",
    name="DceExcerptEntry",
    doc="Batched excerpt DCE: the reason and verdict for the sentence numbered ``id``.",
)
DceExcerptBatchReply = batch_reply(
    DceExcerptEntry,
    "sentence",
    name="DceExcerptBatchReply",
    doc="Batched excerpt DCE (``batch_size`` > 1 with retrieval): one entry per numbered sentence, each judged on its "
    "own against the same excerpt.",
    example={
        "results": [
            {"id": 1, "reason": "Consistent: the EXCERPT says the museum opened in 1998.", "is_consistent": True},
            {"id": 2, "reason": 'Inconsistent: "in Lyon" is wrong; the EXCERPT says Paris.', "is_consistent": False},
        ]
    },
)


Mark = Annotated[int, WithJsonSchema({"type": "integer", "enum": [1, -1]})]


class AmcReply(Reply):
    """AMC: exactly ``{"marks": [...]}``, each mark the JSON integer 1 or -1 (booleans, floats, strings and
    words are not marks; any other key makes the reply unusable). The count is checked by :func:`parse_amc`."""

    model_config = ConfigDict(extra="forbid")

    marks: list[Mark] = Field(
        description="one mark per assessment, in order: 1 if it finds the sentence "
        "consistent, -1 if it reports any problem"
    )

    @field_validator("marks")
    @classmethod
    def _plus_or_minus_one(cls, marks: list[int]) -> list[int]:
        bad = [m for m in marks if m not in (1, -1)]
        if bad:
            raise ValueError(f"a mark must be 1 or -1, got {bad[0]}")
        return marks


REASON_ECHOES = shown_strings(DceReply) | shown_strings(DceSingleReply) | shown_strings(DceExcerptBatchReply)


@dataclass(frozen=True)
class DceReason:
    """One reason of a DCE reply. ``unit`` (0-based) is None when it is not about one unit."""

    text: str
    unit: int | None


@dataclass(frozen=True)
class DceJudgment:
    """A parsed DCE reply: its usable reasons and the model's overall verdict."""

    reasons: list[DceReason]
    is_consistent: bool


def _stated_reason(text: str) -> str | None:
    """The reason as written, or None when it is empty, a placeholder or the prompt's own example."""
    reason = text.strip()
    return None if is_placeholder(reason, REASON_ECHOES) else reason


def parse_dce_sentences(text: str, count: int) -> DceJudgment:
    """The reasons of a sentence-level DCE reply about ``count`` numbered sentences. Entries whose reason is
    a placeholder are dropped. Raises ParseError when the reply is not the declared schema, names a sentence
    that does not exist, or has no usable reason."""
    reply = DceReply.parse(text)
    reasons: list[DceReason] = []
    for entry in reply.sentences:
        if entry.id is not None and not 1 <= entry.id <= count:
            raise ParseError(f"a reason names sentence {entry.id}; the TEXT has {count} sentence(s)")
        reason = _stated_reason(entry.reason)
        if reason is not None:
            reasons.append(DceReason(reason, None if entry.id is None else entry.id - 1))
    if not reasons:
        raise ParseError(
            "the reply gives no reason"
            if not reply.sentences
            else "the reply's reasons are only placeholders or the prompt's example"
        )
    return DceJudgment(reasons, reply.is_consistent)


def parse_dce_single(text: str) -> DceJudgment:
    """The one reason of a paragraph-level (or one-sentence) DCE reply."""
    reply = DceSingleReply.parse(text)
    reason = _stated_reason(reply.reason)
    if reason is None:
        raise ParseError("the reason is empty, a placeholder or the prompt's example")
    return DceJudgment([DceReason(reason, 0)], reply.is_consistent)


def parse_amc(text: str, count: int) -> list[int]:
    """Exactly ``count`` marks from ``{"marks": [...]}`` (see :class:`AmcReply`)."""
    marks = AmcReply.parse(text).marks
    if len(marks) != count:
        raise ParseError(f"expected {count} marks, got {len(marks)}")
    return list(marks)


def number_claims(claims: Sequence[Claim]) -> str:
    return bracket_numbered([c.text for c in claims])


def bracket_numbered(texts: Sequence[str]) -> str:
    """``[1] first`` / ``[2] second`` ..., each text on one line (DCE's numbering)."""
    return "\n".join(f"[{i}] {' '.join(t.split())}" for i, t in enumerate(texts, 1))
