"""HTTP service: ``POST /check`` and ``POST /improve`` return Report JSON (or the web report with
``?format=html``); bearer-token auth, request size limits and per-request timeouts.

Needs the ``server`` extra (FastAPI + uvicorn). Run with ``halluscope serve``.
"""

from __future__ import annotations

import asyncio
import hmac
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from halluscope.config import Config


@dataclass(frozen=True)
class ServerSettings:
    token: str | None = None  # required bearer token; None = no auth (bind to loopback then)
    max_chars: int = 400_000  # source + target characters per request
    timeout_s: float = 300.0  # per-request wall-clock limit
    default_method: str = "geval"


class CheckRequest(BaseModel):
    source: str
    target: str
    method: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class ImproveRequest(BaseModel):
    source: str
    target: str
    rounds: int = Field(default=2, ge=1, le=5)
    options: dict[str, Any] = Field(default_factory=dict)


def create_app(config: Config | None = None, settings: ServerSettings | None = None):
    from fastapi import Depends, FastAPI, Header, HTTPException, Query
    from fastapi.responses import HTMLResponse, JSONResponse

    from halluscope.methods import InputError, get_method, list_methods
    from halluscope.report import render_html

    config = config or Config()
    settings = settings or ServerSettings()
    app = FastAPI(title="halluscope", version="0.1.0")
    instances: dict[str, Any] = {}  # one method instance per (name, options): reuses its LLM client

    def authorize(authorization: str | None = Header(default=None)) -> None:
        if settings.token is None:
            return
        expected = f"Bearer {settings.token}"
        if authorization is None or not hmac.compare_digest(authorization, expected):
            raise HTTPException(status_code=401, detail="missing or wrong bearer token")

    def method_for(name: str, options: dict[str, Any]):
        key = f"{name}:{sorted(options.items())!r}"
        if key not in instances:
            try:
                instances[key] = get_method(name, config=config, **options)
            except (KeyError, TypeError, ValueError) as exc:
                raise HTTPException(status_code=400, detail=str(exc).strip("'\"")) from exc
        return instances[key]

    async def run(method, source: str, target: str, fmt: str):
        if len(source) + len(target) > settings.max_chars:
            raise HTTPException(status_code=413, detail=f"source + target exceed {settings.max_chars} characters")
        try:
            report = await asyncio.wait_for(method.acheck(source, target), timeout=settings.timeout_s)
        except asyncio.TimeoutError as exc:
            raise HTTPException(status_code=504, detail=f"check took longer than {settings.timeout_s:.0f}s") from exc
        except InputError as exc:
            raise HTTPException(status_code=422, detail=str(exc)) from exc
        if fmt == "html":
            return HTMLResponse(render_html(report, source, target))
        return JSONResponse(report.model_dump(mode="json"))

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/methods", dependencies=[Depends(authorize)])
    async def methods() -> list[str]:
        return list_methods()

    @app.post("/check", dependencies=[Depends(authorize)])
    async def check(req: CheckRequest, format: str = Query("json", pattern="^(json|html)$")):
        return await run(method_for(req.method or settings.default_method, req.options), req.source, req.target, format)

    @app.post("/improve", dependencies=[Depends(authorize)])
    async def improve(req: ImproveRequest, format: str = Query("json", pattern="^(json|html)$")):
        options = {**req.options, "rounds": req.rounds}
        return await run(method_for("improve", options), req.source, req.target, format)

    return app
