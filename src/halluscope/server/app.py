"""The FastAPI app: routes only; the work is :class:`~halluscope.server.service.Service`'s, the limits
:class:`~halluscope.server.guard.Guard`'s."""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeVar

from fastapi import FastAPI, HTTPException, Path, Query, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError

from halluscope._version import package_version
from halluscope.config import Config
from halluscope.llm import LLM
from halluscope.methods import list_methods
from halluscope.records import Report
from halluscope.report import RenderTimeout, render_html
from halluscope.server.answer_guard import add_guard_route
from halluscope.server.dashboard import job_stats, render_dashboard
from halluscope.server.guard import Guard
from halluscope.server.jobs import result_line, valid_job_id
from halluscope.server.jobs.base import JobStoreUnavailable
from halluscope.server.login import add_login_routes
from halluscope.server.metrics import CONTENT_TYPE
from halluscope.server.pages import render_job_page
from halluscope.server.redact import redact_paths
from halluscope.server.schemas import (
    BatchRequest,
    CheckRequest,
    Deleted,
    ImproveRequest,
    ItemResult,
    JobInfo,
    JobList,
    JobRequest,
    Problem,
)
from halluscope.server.service import ClientError, Service, check_deadline, joined_source
from halluscope.server.settings import ServerSettings

M = TypeVar("M", bound=BaseModel)
_BODY_MODELS: tuple[type[BaseModel], ...] = (CheckRequest, ImproveRequest, BatchRequest, JobRequest)
_INLINE_PARSE_BYTES = 64 * 1024  # larger bodies are parsed on a thread, off the HTTP loop
MAX_INDEX = 2**63 - 1
"""The largest item index a path or query names (SQLite's integer range): a larger one is 422, never a 500."""

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "Missing or wrong bearer token (checked before the body is read)."},
    413: {
        "model": Problem,
        "description": (
            "Body, item count or characters above the limit (Content-Length is checked before the body is read)."
        ),
    },
    422: {"model": Problem, "description": "Malformed request, empty text, or options the method cannot run with."},
}
_WORK_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    400: {"model": Problem, "description": "Unknown method or bad options (the message lists the valid ones)."},
    429: {"model": Problem, "description": "Every check slot busy and the queue full; see Retry-After."},
    503: {
        "model": Problem,
        "description": (
            "No slot within the queue timeout, too many open requests, or the model backend unusable; see Retry-After."
        ),
    },
    504: {"model": Problem, "description": "The check took longer than the time limit."},
}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": Problem, "description": "No such job (or item)."}}


def _redacted(error: str | None) -> str | None:
    """A stored item error as a caller sees it: no server paths (:func:`redact_paths`)."""
    return None if error is None else redact_paths(error)


def _body_doc(model: type[BaseModel]) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def _ndjson_doc(description: str) -> dict[int | str, dict[str, Any]]:
    return {
        200: {
            "description": description,
            "content": {"application/x-ndjson": {"schema": {"$ref": "#/components/schemas/ItemResult"}}},
        }
    }


async def _parse(request: Request, model: type[M]) -> M:
    """The body as ``model``: 422 with pydantic's errors (without echoing the input) when it does not fit."""
    body = bytearray()  # grown in place: a 32 MB body costs 32 MB, not a list of chunks plus their join
    async for chunk in request.stream():
        body += chunk
    try:
        if len(body) <= _INLINE_PARSE_BYTES:
            return model.model_validate_json(body)
        return await asyncio.to_thread(model.model_validate_json, body)
    except ValidationError as exc:
        detail = exc.errors(include_url=False, include_input=False, include_context=False)
        raise ClientError(422, detail) from None  # type: ignore[arg-type]


def create_app(config: Config | None = None, settings: ServerSettings | None = None, llm: LLM | None = None) -> FastAPI:  # noqa: C901 - the route table: each route is a small nested function
    """The service. ``llm``: use this client for every method (tests pass a scripted FakeModel); default
    one client built from ``config``, shared by all methods and requests."""
    config = config or Config()
    settings = settings or ServerSettings()
    service = Service(config, settings, llm)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        await asyncio.to_thread(service.ensure_started)  # resumes unfinished jobs at once
        try:
            yield
        finally:
            await asyncio.to_thread(service.stop)

    app = FastAPI(
        title="halluscope",
        version=package_version(),
        lifespan=lifespan,
        description=(
            "Find, locate, explain and fix hallucinations in generated text against its source. "
            "Send `Authorization: Bearer <token>` on every route but /health, /ready and the docs. "
            "Limits are enforced before a body is read; refusals under load carry Retry-After. "
            "Every answer carries X-Request-ID."
        ),
    )
    app.state.service = service
    app.add_middleware(Guard, service=service)
    service.routes = app.router.routes
    weakref.finalize(app, service.stop, wait=False)  # an app dropped without a lifespan (tests) stops its threads

    add_login_routes(app, service)  # the web pages open in a browser once a token is set

    @app.exception_handler(ClientError)
    async def _client_error(_request: Request, exc: ClientError) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(JobStoreUnavailable)
    async def _store_unavailable(_request: Request, exc: JobStoreUnavailable) -> JSONResponse:
        return JSONResponse(
            {"detail": f"the job store is unavailable: {exc}"},
            status_code=503,
            headers={"Retry-After": str(settings.retry_after_s)},
        )

    def store():
        service.ensure_started()
        assert service.store is not None
        return service.store

    async def job_or_404(job_id: str) -> dict[str, Any]:
        job = await asyncio.to_thread(store().get, job_id) if valid_job_id(job_id) else None
        if job is None:
            raise HTTPException(404, f"no job {job_id}")
        return job

    def job_info(job: dict[str, Any]) -> JobInfo:
        base = f"/jobs/{job['id']}"
        return JobInfo(
            **{**job, "error": _redacted(job.get("error"))},
            links={"self": base, "results": f"{base}/results", "report": f"{base}/report"},
        )

    add_guard_route(app, service)
    fmt_query = Query("json", pattern="^(json|html)$", description="`html` for the web report.")

    # --- probes and metadata ------------------------------------------------------------------------

    @app.get("/health", tags=["operations"], summary="Liveness: answers while the process serves HTTP.")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/ready",
        tags=["operations"],
        summary="Readiness: 503 while the check queue is full.",
        responses={503: {"description": "Not accepting checks right now."}},
    )
    async def ready() -> JSONResponse:
        full = service.admission.queued >= settings.max_queue
        body = {
            "status": "busy" if full else "ready",
            "in_flight": service.admission.in_flight,
            "queued": service.admission.queued,
            "boot_id": service.boot_id,
        }
        return JSONResponse(
            body,
            status_code=503 if full else 200,
            headers={"Retry-After": str(settings.retry_after_s)} if full else None,
        )

    @app.get(
        "/metrics",
        tags=["operations"],
        response_class=Response,
        summary="Prometheus metrics (text format): requests, latency, LLM calls, tokens, cache hits, "
        "unscored reports by reason class, queue depth, jobs, process memory.",
    )
    async def metrics() -> Response:
        return Response(await asyncio.to_thread(service.metrics.render), media_type=CONTENT_TYPE)

    @app.get("/methods", tags=["checks"], summary="The registered methods.", responses=_ERRORS)
    async def methods() -> list[str]:
        return list_methods()

    # --- checks -------------------------------------------------------------------------------------

    def renderer(fmt: str, source: str, target: str):
        if fmt == "html":
            return lambda report: render_html(report, source, target, deadline=check_deadline()).encode()
        return lambda report: report.model_dump_json().encode()

    def respond(fmt: str, body: bytes) -> Response:
        return Response(body, media_type="text/html; charset=utf-8" if fmt == "html" else "application/json")

    async def check_pair(
        source: str | list[str], target: str, method_name: str, options: dict[str, Any], fmt: str
    ) -> Response:
        """Check one pair with ``method_name`` (its size checked first) and answer in ``fmt``; ``source`` is one
        text or a list of chunks."""
        text, _ = joined_source(source)
        service.check_size(text, target)
        method = await service.method(method_name, options)
        return respond(fmt, await service.check(method, source, target, renderer(fmt, text, target)))

    @app.post(
        "/check",
        tags=["checks"],
        response_model=Report,
        responses=_WORK_ERRORS,
        openapi_extra=_body_doc(CheckRequest),
        summary="Check one pair: the Report as JSON, or the web report with ?format=html.",
    )
    async def check(request: Request, format: str = fmt_query) -> Response:
        req = await _parse(request, CheckRequest)
        name, options = service.resolve(req.method, req.options)
        return await check_pair(req.source, req.target, name, options, format)

    @app.post(
        "/improve",
        tags=["checks"],
        response_model=Report,
        responses=_WORK_ERRORS,
        openapi_extra=_body_doc(ImproveRequest),
        summary="Check one pair with DCR and rewrite what it flags (RAI); the Report carries the verified fix.",
    )
    async def improve(request: Request, format: str = fmt_query) -> Response:
        req = await _parse(request, ImproveRequest)
        return await check_pair(req.source, req.target, "improve", {**req.options, "rounds": req.rounds}, format)

    @app.post(
        "/check/batch",
        tags=["checks"],
        response_class=StreamingResponse,
        responses={
            **_WORK_ERRORS,
            **_ndjson_doc(
                "One ItemResult per line, in the order the items finish (`index` is the item's position). "
                "An item that fails is a line with its status and error; the others go on."
            ),
        },
        openapi_extra=_body_doc(BatchRequest),
        summary="Check many pairs with one method; NDJSON streamed as each finishes.",
    )
    async def check_batch(request: Request) -> StreamingResponse:
        req = await _parse(request, BatchRequest)
        examples = service.validate_items(req.items, settings.max_batch_items, "batch")
        method = await service.method(*service.resolve(req.method, req.options))
        return StreamingResponse(
            service.batch(method, examples),
            media_type="application/x-ndjson",
            headers={"X-Accel-Buffering": "no", "Cache-Control": "no-store"},
        )

    # --- jobs ---------------------------------------------------------------------------------------

    @app.post(
        "/jobs",
        tags=["jobs"],
        status_code=202,
        response_model=JobInfo,
        responses={**_WORK_ERRORS, 429: {"model": Problem, "description": "Too many jobs queued or running."}},
        openapi_extra=_body_doc(JobRequest),
        summary="Start a background job over a dataset or a list of pairs; survives server restarts.",
    )
    async def create_job(request: Request) -> JSONResponse:
        req = await _parse(request, JobRequest)
        store()
        job_id = await service.submit_job(req)
        info = job_info(await job_or_404(job_id))
        return JSONResponse(info.model_dump(mode="json"), status_code=202, headers={"Location": f"/jobs/{job_id}"})

    @app.get(
        "/",
        tags=["jobs"],
        response_class=HTMLResponse,
        responses=_ERRORS,
        summary=(
            "The dashboard: recent jobs (method, model, start, duration, items, inconsistent, unscored, a score "
            "histogram), filtered by ?status= and ?method=, each linking to its report."
        ),
    )
    async def jobs_page(
        limit: int = Query(100, ge=1, le=1000),
        status: Literal["", "queued", "running", "done", "failed", "cancelled"] = "",
        method: str = Query("", max_length=200),
    ) -> HTMLResponse:
        db = store()

        def gather() -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], list[str]]:
            jobs = db.list(limit, status or None)
            methods = sorted({j["method"] for j in jobs})
            infos = [job_info(j).model_dump(mode="json") for j in jobs if not method or j["method"] == method]
            return infos, {j["id"]: job_stats(db, j) for j in infos}, methods

        infos, stats, methods = await asyncio.to_thread(gather)
        return HTMLResponse(render_dashboard(infos, stats, limit, status or None, method or None, methods))

    @app.get("/jobs", tags=["jobs"], response_model=JobList, responses=_ERRORS, summary="Recent jobs, newest first.")
    async def list_jobs(
        status: Literal["queued", "running", "done", "failed", "cancelled"] | None = None,
        limit: int = Query(100, ge=1, le=1000),
    ) -> JobList:
        jobs = await asyncio.to_thread(store().list, limit, status)
        return JobList(jobs=[job_info(j) for j in jobs])

    @app.get(
        "/jobs/{job_id}",
        tags=["jobs"],
        response_model=JobInfo,
        responses={**_ERRORS, **_NOT_FOUND},
        summary="A job's status, progress, counts and LLM usage.",
    )
    async def get_job(job_id: str = Path(max_length=64)) -> JobInfo:
        return job_info(await job_or_404(job_id))

    @app.get(
        "/jobs/{job_id}/results",
        tags=["jobs"],
        response_class=StreamingResponse,
        responses={**_ERRORS, **_NOT_FOUND, **_ndjson_doc("One ItemResult per finished item, in index order.")},
        summary="The finished items so far (NDJSON); ?after=N continues after index N.",
    )
    async def job_results(
        job_id: str = Path(max_length=64), after: int = Query(-1, ge=-1, le=MAX_INDEX)
    ) -> StreamingResponse:
        await job_or_404(job_id)
        db = store()

        async def lines():
            last = after
            while rows := await asyncio.to_thread(db.results, job_id, last):
                yield b"".join(
                    result_line(r["idx"], r["item_id"], r["status"], r["report"], _redacted(r["error"])) for r in rows
                )
                last = rows[-1]["idx"]

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    @app.get(
        "/jobs/{job_id}/report",
        tags=["jobs"],
        response_class=HTMLResponse,
        responses={**_ERRORS, **_NOT_FOUND},
        summary="The job's web report: its items (score, label, findings), sortable, each opening its report.",
    )
    async def job_report(job_id: str = Path(max_length=64), limit: int = Query(5000, ge=1, le=100_000)) -> HTMLResponse:
        job = await job_or_404(job_id)
        items = await asyncio.to_thread(store().summaries, job_id, limit)
        page = await asyncio.to_thread(render_job_page, job, items, limit)
        return HTMLResponse(page)

    @app.get(
        "/jobs/{job_id}/items/{index}",
        tags=["jobs"],
        response_model=ItemResult,
        responses={**_ERRORS, **_NOT_FOUND, 409: {"model": Problem, "description": "The item is not finished yet."}},
        summary="One finished item: its ItemResult, or with ?format=html its span-highlight report.",
    )
    async def job_item(job_id: str = Path(max_length=64), index: int = Path(ge=0), format: str = fmt_query) -> Response:
        await job_or_404(job_id)
        # past the largest index a store holds there is no such item: 404, as for any index past the job's end
        found = await asyncio.to_thread(store().item, job_id, index) if index <= MAX_INDEX else None
        if found is None:
            raise HTTPException(404, f"job {job_id} has no item {index}")
        example, row = found
        if row is None:
            raise HTTPException(409, f"item {index} of job {job_id} is not finished yet")
        if format == "html":
            if row["report"] is None:
                raise ClientError(409, f"item {index} has no report: {row['error']}")  # redacted by ClientError
            if example is None:
                raise ClientError(409, f"item {index} has no web report: its stored source and target cannot be read")
            report = Report.model_validate_json(row["report"])
            title = f"halluscope · job {job_id[:8]} · item {example.id}"
            deadline = time.monotonic() + settings.timeout_s
            try:
                page = await asyncio.to_thread(
                    functools.partial(render_html, deadline=deadline), report, example.source, example.target, title
                )
            except RenderTimeout:
                raise ClientError(
                    504,
                    f"the HTML report of item {index} ({len(report.findings)} findings) did not fit in the time limit "
                    f"of {settings.timeout_s:g}s and was stopped; ask for the JSON result (format=json)",
                ) from None
            return HTMLResponse(page)
        return Response(
            result_line(row["idx"], row["item_id"], row["status"], row["report"], _redacted(row["error"])),
            media_type="application/json",
        )

    @app.delete(
        "/jobs/{job_id}",
        tags=["jobs"],
        response_model=Deleted,
        responses={**_ERRORS, **_NOT_FOUND},
        summary="Stop a job if it runs and delete it with its results.",
    )
    async def delete_job(job_id: str = Path(max_length=64)) -> Deleted:
        if not valid_job_id(job_id) or not await service.delete_job(job_id):
            raise HTTPException(404, f"no job {job_id}")
        return Deleted(id=job_id)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in (*_BODY_MODELS, ItemResult):
                doc = model.model_json_schema(ref_template="#/components/schemas/{model}")
                for name, sub in doc.pop("$defs", {}).items():
                    components.setdefault(name, sub)
                components.setdefault(model.__name__, doc)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
