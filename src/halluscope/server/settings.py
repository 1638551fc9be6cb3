"""``ServerSettings``: every limit of the service in one typed place (CLI flags of ``halluscope serve``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

MiB = 2**20


@dataclass(frozen=True)
class ServerSettings:
    token: str | None = None
    """Bearer token required on every route but /health, /ready and the docs; None = no auth (loopback only)."""

    max_chars: int = 400_000
    """Most source + target characters of one pair (a /check request, a batch item, a job item)."""

    timeout_s: float = 300.0
    """Wall-clock limit of one check (a /check request, one batch or job item) -> 504."""

    max_calls: int = 1000
    """Ceiling on the LLM calls of one check (a /check or /improve request, one batch or job item): a request's
    ``options.max_calls`` may lower it, never raise it (a request's 0, "no limit", means this ceiling), and a
    config ``max_calls`` above it (or 0) is lowered to it. 0 = no ceiling but the config's ``max_calls``."""

    default_method: str | None = None
    """Method used when a request names none, with its own defaults (``--default-method``). ``None``: what
    ``halluscope check`` and ``halluscope.check`` run, the config's ``method`` if set, else
    :data:`~halluscope.config.DEFAULT_METHOD` with :data:`~halluscope.config.DEFAULT_METHOD_OPTIONS` under the
    request's options (:meth:`~halluscope.server.service.Service.resolve`)."""

    max_body_bytes: int = 32 * MiB
    """Largest request body of /check/batch and POST /jobs. /check and /improve allow 12 bytes per character
    of ``max_chars`` (the worst case of JSON escaping) plus 1 MiB; other routes 64 KiB. Enforced from
    Content-Length before the body is read, and on the bytes as they arrive."""

    body_timeout_s: float = 30.0
    """Longest time for a request body to arrive in full (slow senders get 408 and hold no check slot)."""

    header_timeout_s: float = 10.0
    """Longest time for a request's headers to arrive, from the connection's start or its previous response:
    past it the connection gets 408 and is closed (headers at 1 byte/s no longer hold it open)."""

    max_in_flight: int = 64
    """Checks (/check, /improve, /check/batch) running at once; more wait in the queue."""

    max_queue: int = 512
    """Checks waiting for a slot; one more is refused with 429 and Retry-After."""

    queue_timeout_s: float = 30.0
    """Longest wait for a slot; after it the request is refused with 503 and Retry-After."""

    max_open_requests: int = 2048
    """Requests of any kind being handled at once (probes excepted); one more gets 503 and Retry-After."""

    retry_after_s: int = 2
    """Seconds sent in Retry-After with 429 and 503."""

    max_batch_items: int = 1000
    """Most pairs in one /check/batch request (-> 413)."""

    batch_concurrency: int = 8
    """Items of one batch checked at once."""

    method_cache_size: int = 32
    """Method instances kept (least recently used evicted), keyed by method and validated options."""

    workers: int = 2
    """Threads, each with its own event loop, that run the checks: CPU-heavy work never blocks the loop
    that answers HTTP (so /health and refusals stay fast)."""

    cpu_workers: int = field(default_factory=lambda: min(2, os.cpu_count() or 1))
    """Processes that run the checks calling no LLM (``gate``, ``rouge``, a no-LLM ensemble or pipeline): their
    CPU work then holds no lock the HTTP loop needs (on a thread it holds the GIL, and /health waits for it).
    Default ``min(2, CPUs)``; 0 = run them on the worker threads like the others (``halluscope/server/cpu_pool.py``)."""

    jobs_db: Path | None = None
    """SQLite file of the jobs; default ``jobs.sqlite`` next to the LLM response cache (which resumed jobs
    reuse). One server process per file (a lock file enforces it)."""

    jobs_url: str | None = None
    """Keep the jobs in Redis (``redis://host:6379/0``, ``rediss://``, ``unix://``; ``?prefix=`` to share one
    server between deployments) instead of SQLite: every replica given the same URL accepts jobs, claims
    their items while it has capacity and answers for every job (docs/deploy.md). None = SQLite (``jobs_db``)."""

    job_lease_s: float = 30.0
    """With ``jobs_url``: how long an item claimed by a replica stays its own without a renewal (renewed every
    quarter of it while the item runs); a dead replica's items are taken over by another after this."""

    max_jobs: int = 100
    """Jobs queued or running at once; one more is refused with 429."""

    max_job_items: int = 100_000
    """Most items in one job (-> 413)."""

    job_concurrency: int = 4
    """Items of one job checked at once."""

    job_item_attempts: int = 5
    """The most times one job item is started (SQLite) or handed to a replica (``jobs_url``); an item started this
    many times without a result (each run ended its server or replica, or was stopped) is recorded unscored with
    the reason, so the job still finishes. An item whose stored data cannot be read is recorded so at once."""

    max_running_jobs: int = 2
    """Jobs running at once; the others wait in the queue (FIFO)."""

    shutdown_grace_s: float = 10.0
    """On shutdown, job items already running get this long to finish (none is started); the rest are
    cancelled and redone at the next start, reusing the replies already in the LLM cache."""

    data_dir: Path | None = None
    """Folder of the named datasets (``final:dev``, ...) a job can name; default as ``halluscope bench``."""

    datasets_dir: Path | None = None
    """A job may name a ``.jsonl`` file only inside this folder; None = dataset files are refused."""

    allowed_models: tuple[str, ...] = ()
    """Models and checkers a request may name in its options (PROBE's ``judges``, ``verifier=nli:<id or path>``,
    ``embedding_model``, ...) besides the server's own model and the default embedding model; any other is refused
    with 403 before anything is loaded (``--allow-model``; ``*`` allows every name)."""

    metrics_public: bool = False
    """Serve /metrics without the token (for scrapers that cannot send one)."""

    def body_limit(self, route: str) -> int:
        """The largest body accepted on ``route`` (a route template such as ``/check``)."""
        if route in ("/check/batch", "/jobs"):
            return self.max_body_bytes
        if route in ("/check", "/improve", "/guard"):
            return min(self.max_body_bytes, 12 * self.max_chars + MiB)
        return 64 * 1024
