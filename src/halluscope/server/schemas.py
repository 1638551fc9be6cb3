"""The service's request and response records (they are what /docs shows)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from halluscope.config import DEFAULT_METHOD, DEFAULT_METHOD_OPTIONS
from halluscope.records import Report, Usage

_DEFAULT_DOC = (
    "Default: the server's `--default-method` if set, else what `halluscope check` runs: the config file's "
    f"`method`, else `{DEFAULT_METHOD}` with {', '.join(f'`{k}={v}`' for k, v in DEFAULT_METHOD_OPTIONS.items())} "
    "unless the request's options set it."
)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CheckRequest(_Body):
    """One pair to check."""

    source: str | list[str] = Field(
        description="The text the target should be grounded in, or the list of chunks a "
        "retriever returned (each piece of evidence then names its chunk)."
    )
    target: str = Field(description="The generated text to check.")
    method: str | None = Field(default=None, description=f"A registered method (GET /methods). {_DEFAULT_DOC}")
    options: dict[str, Any] = Field(
        default_factory=dict, description="The method's options (`halluscope methods NAME`)."
    )


class ImproveRequest(_Body):
    """One pair to check and rewrite (DCR + RAI)."""

    source: str | list[str] = Field(description="One text, or a list of chunks.")
    target: str
    rounds: int = Field(default=2, ge=1, le=5, description="Most rewrite rounds.")
    options: dict[str, Any] = Field(default_factory=dict, description="Options of the `improve` method.")


class Pair(_Body):
    """One item of a batch or a job."""

    id: str | None = Field(
        default=None, max_length=256, description="Your id for the item (echoed back); default: its index."
    )
    source: str | list[str] = Field(description="One text, or a list of chunks.")
    target: str


class BatchRequest(_Body):
    """Many pairs checked with one method; the answer streams one NDJSON line per pair as each finishes."""

    items: list[Pair] = Field(min_length=1)
    method: str | None = Field(default=None, description=f"A registered method (GET /methods). {_DEFAULT_DOC}")
    options: dict[str, Any] = Field(default_factory=dict)


class ItemResult(BaseModel):
    """One line of /check/batch or GET /jobs/{job_id}/results: a report, or the error that stopped the item."""

    index: int = Field(description="Position of the item in the request or job.")
    id: str | None = Field(default=None, description="The item's id.")
    status: int = Field(description="200 with a report; else the HTTP status the error would have had (422, 504, ...).")
    report: Report | None = None
    error: str | None = None


class JobRequest(_Body):
    """A job: a dataset (a name such as ``final:dev``, or a ``.jsonl`` file inside the server's datasets folder)
    or a list of pairs, checked in the background with one method. Jobs survive a server restart."""

    method: str | None = Field(default=None, description=f"A registered method (GET /methods). {_DEFAULT_DOC}")
    options: dict[str, Any] = Field(default_factory=dict)
    dataset: str | None = Field(default=None, max_length=1024)
    items: list[Pair] | None = None
    limit: int | None = Field(default=None, ge=1, description="Only the first N items of the dataset.")
    name: str | None = Field(default=None, max_length=256, description="A label for you.")

    @model_validator(mode="after")
    def _one_input(self) -> JobRequest:
        if (self.dataset is None) == (self.items is None):
            raise ValueError("give exactly one of `dataset` and `items`")
        if self.items is not None and not self.items:
            raise ValueError("`items` is empty")
        return self


JobStatus = Literal["queued", "running", "done", "failed", "cancelled"]


class JobInfo(BaseModel):
    """A job's state and progress. Counts cover finished items; ``usage`` is the LLM cost of those items
    (resumed items that reused cached replies show as cache hits, not calls)."""

    id: str
    status: JobStatus
    name: str | None = None
    method: str
    options: dict[str, Any]
    dataset: str | None = None
    total: int
    done: int
    scored: int
    unscored: int
    errors: int
    progress: float = Field(description="done / total.")
    mean_score: float | None = Field(default=None, description="Mean score of the scored items.")
    usage: Usage
    attempts: int = Field(description="How many times the job was started (a restart resumes it: 2).")
    created: float
    started: float | None = None
    finished: float | None = None
    error: str | None = None
    links: dict[str, str] = Field(default_factory=dict)


class JobList(BaseModel):
    jobs: list[JobInfo]


class Deleted(BaseModel):
    id: str
    deleted: bool = True


class Problem(BaseModel):
    """Every error answer: what went wrong, in words."""

    detail: Any
