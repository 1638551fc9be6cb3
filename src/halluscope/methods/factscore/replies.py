"""FActScore's reply schemas: the atomic facts, the verification (a stated boolean, with descriptions of each
inconsistency or without), their batch forms (derived: the single reply plus ``id``) and the de-duplication's
selection by number."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from halluscope.llm.replies import Reply
from halluscope.methods.batching import batch_reply, numbered_entry
from halluscope.text.descriptions import clean_descriptions
from halluscope.text.placeholders import example_strings, normalized, shown_strings


class FactEntry(BaseModel):
    """One atomic fact and the TEXT sentence it comes from."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    sentence: int = Field(ge=1, description="the number of the TEXT sentence the fact comes from")
    fact: str = Field(description="one short, self-contained statement carrying exactly one piece of information")


class FactsReply(Reply):
    """Decomposition: the declared list of atomic facts (a bare list of fact objects is read as this list)."""

    facts: list[FactEntry] = Field(description="every atomic fact of the TEXT, in TEXT order")
    example: ClassVar[dict[str, Any] | None] = {
        "facts": [
            {"sentence": 1, "fact": "The museum opened in 1998."},
            {"sentence": 1, "fact": "The museum is in Lyon."},
        ]
    }
    bare_list_field: ClassVar[str | None] = "facts"
    refuse_example_echo: ClassVar[bool] = False  # parse_facts keeps an example fact only when the TEXT says it


class FactCheckReply(Reply):
    """Verification without descriptions: only the stated boolean counts."""

    supported: bool = Field(
        description="true if the SOURCE states the FACT or it follows directly from the "
        "SOURCE; false if the SOURCE contradicts it or does not say it"
    )


class FactJudgmentReply(FactCheckReply):
    """Verification with descriptions (FINAL's detection prompt): the stated boolean, and for an unsupported
    fact each inconsistency described separately. Echoed placeholders are dropped; "supported" with real
    inconsistencies listed contradicts itself and is refused."""

    inconsistencies: list[str] = Field(
        default_factory=list,
        description="when the fact is not supported: each inconsistency separately, saying what the fact "
        "claims (its words in double quotes) and what the SOURCE says instead or does not "
        "contain; an empty list when it is supported",
    )
    example: ClassVar[dict[str, Any] | None] = {
        "supported": False,
        "inconsistencies": ['The fact says the museum opened in "1998", but the SOURCE says it opened in 2001.'],
    }

    @field_validator("inconsistencies")
    @classmethod
    def _real_descriptions(cls, items: list[str]) -> list[str]:
        if any(normalized(item) in DESCRIPTION_EXAMPLES for item in items):
            raise ValueError("an inconsistency is copied from the format's example: the judgment is the example's")
        return clean_descriptions(items, DESCRIPTION_ECHOES, refuse_echoes=False)

    @model_validator(mode="after")
    def _consistent(self) -> FactJudgmentReply:
        if self.supported and self.inconsistencies:
            raise ValueError('"supported" is true but inconsistencies are listed: the reply contradicts itself')
        return self


FactCheckBatchEntry = numbered_entry(
    FactCheckReply,
    "fact",
    name="FactCheckBatchEntry",
    doc="Batched verification without descriptions: the stated boolean for the fact numbered ``id``.",
)
FactJudgmentBatchEntry = numbered_entry(
    FactJudgmentReply,
    "fact",
    name="FactJudgmentBatchEntry",
    doc="Batched verification with descriptions: the judgment of the fact numbered ``id``.",
)
FactCheckBatchReply = batch_reply(
    FactCheckBatchEntry,
    "fact",
    name="FactCheckBatchReply",
    doc="Batched verification without descriptions: one entry per numbered fact.",
    example={"results": [{"id": 1, "supported": True}, {"id": 2, "supported": False}]},
)
FactJudgmentBatchReply = batch_reply(
    FactJudgmentBatchEntry,
    "fact",
    name="FactJudgmentBatchReply",
    doc="Batched verification with descriptions: one entry per numbered fact.",
    example={
        "results": [
            {"id": 1, "supported": True, "inconsistencies": []},
            {
                "id": 2,
                "supported": False,
                "inconsistencies": [
                    'The fact says the museum opened in "1998", but the SOURCE says it opened in 2001.'
                ],
            },
        ]
    },
)


class KeepReply(Reply):
    """LLM de-duplication: the numbers of the descriptions to keep."""

    keep: list[int] = Field(
        description="the numbers of the descriptions to keep: one from each group of "
        "duplicates, and every description that has no duplicate"
    )
    example: ClassVar[dict[str, Any] | None] = {"keep": [1, 3]}
    refuse_example_echo: ClassVar[bool] = False  # numbers only, no verdict: [1, 3] can be the real selection


FACT_ECHOES = shown_strings(FactsReply)
FACT_EXAMPLES = example_strings(FactsReply)
DESCRIPTION_ECHOES = shown_strings(FactJudgmentReply) | shown_strings(FactJudgmentBatchReply)
DESCRIPTION_EXAMPLES = example_strings(FactJudgmentReply) | example_strings(FactJudgmentBatchReply)
