"""``halluscope serve``: the HTTP service (checks, batches, persistent jobs, metrics; see docs/service.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from halluscope.cli.common import (
    NO_FLAGS,
    ModelFlags,
    either,
    fail,
    finite_number,
    model_options,
)
from halluscope.server.settings import MiB, ServerSettings

LOOPBACK = ("127.0.0.1", "localhost", "::1")
DEFAULTS = ServerSettings()  # the service's defaults are declared there once; each flag's default is read from it


@model_options(cache=False)
def serve_command(
    ctx: typer.Context,
    host: Annotated[
        str,
        typer.Option(help="Interface to bind; keep 127.0.0.1 unless a token is set.", envvar="HALLUSCOPE_SERVER_HOST"),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65_535, help="Port.", envvar="HALLUSCOPE_SERVER_PORT")] = 8080,
    token: Annotated[
        str | None,
        typer.Option(
            help="Bearer token required on every request but /health, /ready and the docs.",
            envvar="HALLUSCOPE_SERVER_TOKEN",
            show_default=False,
        ),
    ] = None,
    method: Annotated[
        str | None,
        typer.Option(
            "--default-method",
            "--method",
            help=(
                "Method for a /check, batch or job that names none, run with its own defaults. Unset: as "
                "halluscope check, the config file's method, else dcr with order=verdict_first."
            ),
            envvar="HALLUSCOPE_SERVER_METHOD",
            show_default=False,
        ),
    ] = None,
    max_chars: Annotated[
        int, typer.Option(min=1, help="Max source+target characters per pair.", envvar="HALLUSCOPE_SERVER_MAX_CHARS")
    ] = DEFAULTS.max_chars,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--check-timeout",
            min=0.001,
            callback=finite_number,
            help=(
                f"Time limit of one check in seconds (-> 504; default {DEFAULTS.timeout_s:g}); not "
                "HALLUSCOPE_TIMEOUT_S, which limits one LLM request."
            ),
            envvar="HALLUSCOPE_SERVER_CHECK_TIMEOUT",
            show_default=False,
        ),
    ] = None,
    old_timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout", hidden=True, min=0.001, callback=finite_number, help="Old spelling of --check-timeout."
        ),
    ] = None,
    max_calls: Annotated[
        int,
        typer.Option(
            min=0,
            help=(
                "Ceiling on the LLM calls of one check; a request's options.max_calls may lower it, never "
                "raise it. 0 = none but the config's max_calls."
            ),
            envvar="HALLUSCOPE_SERVER_MAX_CALLS",
        ),
    ] = DEFAULTS.max_calls,
    max_body_mb: Annotated[
        float,
        typer.Option(
            min=0.001,
            callback=finite_number,
            help="Largest body of /check/batch and POST /jobs, in MiB (-> 413, checked before reading).",
            envvar="HALLUSCOPE_SERVER_MAX_BODY_MB",
        ),
    ] = DEFAULTS.max_body_bytes / MiB,
    body_timeout: Annotated[
        float,
        typer.Option(
            min=0.001,
            callback=finite_number,
            help=(
                "Longest time for a request body to arrive in full, in "
                "seconds (-> 408; slow senders hold no check slot)."
            ),
            envvar="HALLUSCOPE_SERVER_BODY_TIMEOUT",
        ),
    ] = DEFAULTS.body_timeout_s,
    header_timeout: Annotated[
        float,
        typer.Option(
            min=0.001,
            callback=finite_number,
            help="Longest time for a request's headers to arrive, in seconds (-> 408 and the connection closed).",
            envvar="HALLUSCOPE_SERVER_HEADER_TIMEOUT",
        ),
    ] = DEFAULTS.header_timeout_s,
    max_in_flight: Annotated[
        int,
        typer.Option(
            min=1,
            help="Checks running at once (/check, /improve, /check/batch).",
            envvar="HALLUSCOPE_SERVER_MAX_IN_FLIGHT",
        ),
    ] = DEFAULTS.max_in_flight,
    max_queue: Annotated[
        int,
        typer.Option(
            min=0,
            help="Checks waiting for a slot; one more gets 429 + Retry-After.",
            envvar="HALLUSCOPE_SERVER_MAX_QUEUE",
        ),
    ] = DEFAULTS.max_queue,
    queue_timeout: Annotated[
        float,
        typer.Option(
            min=0.001,
            callback=finite_number,
            help="Longest wait for a slot in seconds (-> 503 + Retry-After).",
            envvar="HALLUSCOPE_SERVER_QUEUE_TIMEOUT",
        ),
    ] = DEFAULTS.queue_timeout_s,
    max_open_requests: Annotated[
        int,
        typer.Option(
            min=1,
            help="Requests open at once, all routes but probes (-> 503).",
            envvar="HALLUSCOPE_SERVER_MAX_OPEN_REQUESTS",
        ),
    ] = DEFAULTS.max_open_requests,
    max_batch_items: Annotated[
        int, typer.Option(min=1, help="Most pairs in one /check/batch.", envvar="HALLUSCOPE_SERVER_MAX_BATCH_ITEMS")
    ] = DEFAULTS.max_batch_items,
    batch_concurrency: Annotated[
        int,
        typer.Option(min=1, help="Items of one batch checked at once.", envvar="HALLUSCOPE_SERVER_BATCH_CONCURRENCY"),
    ] = DEFAULTS.batch_concurrency,
    workers: Annotated[
        int,
        typer.Option(
            min=1, help="Worker threads (event loops) running the checks.", envvar="HALLUSCOPE_SERVER_WORKERS"
        ),
    ] = DEFAULTS.workers,
    cpu_workers: Annotated[
        int | None,
        typer.Option(
            min=0,
            help=(
                "Processes running the checks that call no LLM (gate, rouge): their CPU work then never delays "
                "/health. 0 = on the worker threads; default min(2, CPUs)."
            ),
            envvar="HALLUSCOPE_SERVER_CPU_WORKERS",
            show_default=False,
        ),
    ] = None,
    jobs_db: Annotated[
        Path | None,
        typer.Option(
            help="Jobs database (SQLite); default jobs.sqlite next to the LLM cache.",
            envvar="HALLUSCOPE_SERVER_JOBS_DB",
        ),
    ] = None,
    jobs_url: Annotated[
        str | None,
        typer.Option(
            help=(
                "Keep jobs in Redis (redis://host:6379/0) so that every replica given the same URL shares "
                "them (docs/deploy.md); --jobs-db is then not used. Default: SQLite (--jobs-db)."
            ),
            envvar="HALLUSCOPE_SERVER_JOBS_URL",
            show_default=False,
        ),
    ] = None,
    job_lease: Annotated[
        float,
        typer.Option(
            min=0.1,
            callback=finite_number,
            help=(
                "With --jobs-url: seconds a claimed item stays a replica's own "
                "without renewal; a dead replica's items are taken over after it."
            ),
            envvar="HALLUSCOPE_SERVER_JOB_LEASE",
        ),
    ] = DEFAULTS.job_lease_s,
    max_jobs: Annotated[
        int, typer.Option(min=1, help="Jobs queued or running at once (-> 429).", envvar="HALLUSCOPE_SERVER_MAX_JOBS")
    ] = DEFAULTS.max_jobs,
    job_concurrency: Annotated[
        int, typer.Option(min=1, help="Items of one job checked at once.", envvar="HALLUSCOPE_SERVER_JOB_CONCURRENCY")
    ] = DEFAULTS.job_concurrency,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="Folder of the named datasets jobs may use (final, summedits, ...).", envvar="HALLUSCOPE_DATA_DIR"
        ),
    ] = None,
    datasets_dir: Annotated[
        Path | None,
        typer.Option(
            help="Jobs may name .jsonl files inside this folder only (default: none).",
            envvar="HALLUSCOPE_SERVER_DATASETS_DIR",
        ),
    ] = None,
    allow_model: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-model",
            help=(
                "A model or checker requests may name in their options (PROBE judges, "
                "verifier=nli:<id or path>, embedding_model), besides the server's own model; "
                "repeatable; '*' allows any. Others get 403 before anything loads."
            ),
            envvar="HALLUSCOPE_SERVER_ALLOW_MODEL",
            show_default=False,
        ),
    ] = None,
    metrics_public: Annotated[
        bool, typer.Option(help="Serve /metrics without the token.", envvar="HALLUSCOPE_SERVER_METRICS_PUBLIC")
    ] = DEFAULTS.metrics_public,
    log_level: Annotated[
        str, typer.Option(help="debug, info, warning or error.", envvar="HALLUSCOPE_SERVER_LOG_LEVEL")
    ] = "info",
    log_format: Annotated[
        str,
        typer.Option(
            help="json (one object per line, with request ids) or text.", envvar="HALLUSCOPE_SERVER_LOG_FORMAT"
        ),
    ] = "json",
    flags: ModelFlags = NO_FLAGS,
) -> None:
    """Serve checks, batches and persistent jobs over HTTP (OpenAPI docs at /docs, metrics at /metrics).

    Every flag can also be set from the environment: HALLUSCOPE_SERVER_<FLAG> for the service's own flags
    (HALLUSCOPE_SERVER_PORT, HALLUSCOPE_SERVER_MAX_IN_FLIGHT, ...), HALLUSCOPE_MODEL / _BASE_URL / _API_KEY /
    _MAX_CONCURRENCY / _DATA_DIR for the shared ones; a flag wins over its variable."""
    # compared by name: typer may ship its own copy of click (and so of the ParameterSource enum)
    given = getattr(ctx.get_parameter_source("timeout"), "name", None) == "COMMANDLINE"
    timeout = either("--check-timeout", timeout, "--timeout", old_timeout, from_command_line=given)
    if timeout is None:
        timeout = DEFAULTS.timeout_s
    try:
        import uvicorn

        from halluscope.server import ServerSettings, create_app
        from halluscope.server.logs import log_config
    except ImportError as exc:
        raise fail(f"the server needs its extra: pip install 'halluscope[server]' ({exc})") from exc
    if host not in LOOPBACK and not token:
        raise fail("refusing to listen beyond loopback without --token / HALLUSCOPE_SERVER_TOKEN")
    if log_format not in ("json", "text"):
        raise fail("--log-format is json or text")
    if min(max_in_flight, max_batch_items, batch_concurrency, workers, max_jobs, job_concurrency) < 1 or max_queue < 0:
        raise fail("limits must be at least 1 (the queue at least 0)")
    if jobs_url:  # wins over --jobs-db (which the container image sets by default)
        from halluscope.server.jobs.redis_store import parse_jobs_url

        try:
            parse_jobs_url(jobs_url)
        except ValueError as exc:
            raise fail(f"--jobs-url: {exc}") from exc
    method = (method or "").strip() or None  # HALLUSCOPE_SERVER_METHOD="" is unset
    if method is not None:
        from halluscope.methods import method_class

        try:
            method_class(method)
        except (KeyError, ImportError) as exc:  # ImportError: a method whose extra is not installed
            raise fail(f"--default-method: {exc.args[0] if exc.args else exc}") from exc
    config = flags.config()
    settings = ServerSettings(
        token=token,
        max_chars=max_chars,
        timeout_s=timeout,
        max_calls=max_calls,
        default_method=method,
        max_body_bytes=int(max_body_mb * 2**20),
        body_timeout_s=body_timeout,
        header_timeout_s=header_timeout,
        max_in_flight=max_in_flight,
        max_queue=max_queue,
        queue_timeout_s=queue_timeout,
        max_open_requests=max_open_requests,
        max_batch_items=max_batch_items,
        batch_concurrency=batch_concurrency,
        workers=workers,
        jobs_db=jobs_db,
        **({} if cpu_workers is None else {"cpu_workers": cpu_workers}),
        jobs_url=jobs_url or None,
        job_lease_s=job_lease,
        max_jobs=max_jobs,
        job_concurrency=job_concurrency,
        data_dir=data_dir,
        datasets_dir=datasets_dir,
        metrics_public=metrics_public,
        allowed_models=tuple(n.strip() for entry in allow_model or () for n in entry.split(",") if n.strip()),
    )
    _check_writable(settings.jobs_db.parent if settings.jobs_db else Path(config.cache_path).parent)
    from halluscope.server.protocol import header_timeout_protocol

    exit_cleanly_on_sigterm()
    uvicorn.run(
        create_app(config, settings),
        host=host,
        port=port,
        log_config=log_config(log_level, log_format),
        http=header_timeout_protocol(settings.header_timeout_s),
        access_log=False,
        timeout_graceful_shutdown=30,
    )


def exit_cleanly_on_sigterm() -> None:
    """After its graceful shutdown, uvicorn raises the signal that stopped it again. SIGTERM's default action
    ends the process without Python's exit handlers, so the check workers' semaphores were never released (the
    resource tracker then warned of "leaked semaphore objects"): SIGTERM exits through Python instead, with the
    status the signal would give (143)."""
    import signal
    import sys

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _check_writable(folder: Path) -> None:
    """Refuse to start (exit 2) when the folder of the jobs database cannot be written: a bind-mounted ``/data``
    owned by another user would otherwise fail on the first job, deep in SQLite."""
    import os

    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent  # created at start: its nearest existing folder must be writable
    writable = existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)
    if not writable:
        uid = os.getuid() if hasattr(os, "getuid") else "this user"
        raise fail(
            f"the folder of the jobs database, {folder}, is not writable by uid {uid}: make it so "
            f"(e.g. chown -R {uid} on a bind-mounted /data) or run the container as the folder's owner "
            '(docker run --user "$(id -u):$(id -g)"); see docs/container.md'
        )
