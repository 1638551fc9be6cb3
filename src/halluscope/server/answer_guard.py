"""``POST /guard``: the guard as a route (:mod:`halluscope.methods.guard`, docs/guard.md).

The body names the chunks, the answer and the policy; the answer is the text to ship, what the guard did with each
sentence, and the citation Report. ``on_fail=raise`` answers 422 with the findings when a sentence fails. The
check runs on the service's shared model client within the service's time limit (504 past it)."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from halluscope.records import Report
from halluscope.server.service import ClientError, Service


class GuardRequest(BaseModel):
    """An answer to guard before it ships."""

    model_config = ConfigDict(extra="forbid")

    contexts: list[str] = Field(min_length=1, description="The retrieved chunks; markers number them from 1.")
    answer: str = Field(description="The generated answer, with citation markers or without.")
    on_fail: Literal["filter", "fix", "raise", "annotate"] = "filter"
    citations: Literal["brackets", "footnote", "source"] | None = Field(
        default=None, description="The marker style; default detected (a mix of styles is refused, 422)."
    )
    uncited: Literal["flag", "check", "ignore"] = "check"
    threshold: float = Field(default=0.5, ge=0.0, le=1.0, description="P(supported) a sentence needs to pass.")


class GuardedSentenceOut(BaseModel):
    sentence: int
    action: str
    status: str
    shipped: str | None
    reason: str


class GuardResponse(BaseModel):
    text: str = Field(description="The answer to ship.")
    changed: bool
    sentences: list[GuardedSentenceOut]
    report: Report


def add_guard_route(app: FastAPI, service: Service) -> None:
    """Register ``POST /guard`` on ``app``."""

    @app.post(
        "/guard",
        tags=["checks"],
        response_model=GuardResponse,
        summary="Guard an answer: the text to ship (unsupported sentences filtered, fixed, marked or refused).",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": GuardRequest.model_json_schema()}},
            }
        },
    )
    async def guard(request: Request) -> JSONResponse:
        from halluscope.methods.guard import GuardError, aguard
        from halluscope.text.citations import CitationStyleError

        try:
            req = GuardRequest.model_validate_json(await request.body())
        except ValidationError as exc:
            raise ClientError(422, exc.errors(include_url=False, include_input=False, include_context=False)) from None  # type: ignore[arg-type]
        service.check_size("".join(req.contexts), req.answer)
        llm = await asyncio.to_thread(service._shared_llm)
        try:
            result = await asyncio.wait_for(
                aguard(
                    req.contexts,
                    req.answer,
                    req.on_fail,
                    style=req.citations,
                    uncited=req.uncited,
                    threshold=req.threshold,
                    llm=llm,
                ),
                timeout=service.settings.timeout_s,
            )
        except GuardError as exc:
            body: dict[str, Any] = {
                "detail": str(exc),
                "findings": [f.model_dump(mode="json") for f in exc.findings],
            }
            return JSONResponse(body, status_code=422)
        except CitationStyleError as exc:
            raise ClientError(422, str(exc)) from None
        except TimeoutError:
            raise ClientError(504, f"the guard took longer than {service.settings.timeout_s} s") from None
        out = GuardResponse(
            text=result.text,
            changed=result.changed,
            sentences=[
                GuardedSentenceOut(
                    sentence=s.index, action=s.action, status=s.status, shipped=s.shipped, reason=s.reason
                )
                for s in result.sentences
            ],
            report=result.report,
        )
        return JSONResponse(out.model_dump(mode="json"))
