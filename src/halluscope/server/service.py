"""``Service``: what the routes call. It owns the shared LLM client, the bounded method cache, the worker
loops that run the checks, the job store and runner, admission control and the metrics. No FastAPI here:
errors are :class:`ClientError` (status + message), turned into responses by the app."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from halluscope.config import Config, resolve_method
from halluscope.llm import LLM, LLMError, get_llm
from halluscope.methods import InputError, Method, get_method, method_class
from halluscope.methods.base import validate_pair
from halluscope.records import Example, Report
from halluscope.report import RenderTimeout
from halluscope.server.admission import Admission
from halluscope.server.allow import ModelNotAllowed, refuse_unlisted
from halluscope.server.cpu_pool import CpuPool, NotInWorker, RemoteError, WorkerDied
from halluscope.server.instances import MethodCache
from halluscope.server.jobs import CheckFailed, JobRunner, JobStore, result_line
from halluscope.server.jobs.base import JobRunnerAPI, JobStoreAPI, JobStoreUnavailable
from halluscope.server.logs import event, request_id
from halluscope.server.metrics import Metrics
from halluscope.server.redact import redact_paths, redact_report, register_root
from halluscope.server.schemas import JobRequest, Pair
from halluscope.server.settings import ServerSettings
from halluscope.server.warmup import warm_up
from halluscope.server.workers import WorkerPool

T = TypeVar("T")

# Errors a method raises at run time that come from what the client asked for (options that validate but
# cannot work together, a value the method rejects mid-run): answered 422, never 500.
_CLIENT_RUN_ERRORS = (ValueError, TypeError, KeyError, ValidationError)
_GRACE_S = 15.0  # a worker stuck in CPU work past the time limit: the HTTP side gives up this much later
_deadline: ContextVar[float | None] = ContextVar("halluscope_check_deadline", default=None)


def check_deadline() -> float | None:
    """The end (``time.monotonic()``) of the time limit of the check whose answer is being shaped here (a
    ``render`` given to :meth:`Service.run_check` reads it: the answer is made within the same limit)."""
    return _deadline.get()


def joined_source(source: str | list[str]) -> tuple[str, dict[str, Any]]:
    """A request's source as one text, plus ``{"source_chunks": [[start, end], ...]}`` when it was a list of chunks
    (joined as :func:`halluscope.contexts.join_contexts` does; the report then names each evidence's chunk)."""
    if isinstance(source, str):
        return source, {}
    from halluscope.contexts import ContextsError, join_contexts

    try:
        text, spans = join_contexts(source)
    except ContextsError as exc:
        raise ClientError(422, str(exc)) from None
    return text, {"source_chunks": [[s.start, s.end] for s in spans]}


class ClientError(Exception):
    """An answer other than 2xx: ``status``, a message (with every server path redacted), and headers
    (Retry-After)."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None):
        if isinstance(detail, str):
            detail = redact_paths(detail)
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers or {}


class BackendUnavailable(RuntimeError):
    pass


def default_jobs_db(config: Config) -> Path:
    return Path(config.cache_path).parent / "jobs.sqlite"


class Service:
    def __init__(self, config: Config, settings: ServerSettings, llm: LLM | None = None):
        self.config, self.settings = config, settings
        self.boot_id = uuid.uuid4().hex[:12]
        self.metrics = Metrics()
        self.admission = Admission(settings.max_in_flight, settings.max_queue, settings.queue_timeout_s)
        self.pool = WorkerPool(settings.workers)
        # the checks that call no LLM run in worker processes (their CPU work would hold the GIL the HTTP loop needs)
        self.cpu = CpuPool(settings.cpu_workers, config) if settings.cpu_workers > 0 else None
        self._recipes: weakref.WeakKeyDictionary[Method, tuple[str, dict[str, Any]]] = weakref.WeakKeyDictionary()
        self.methods = MethodCache(settings.method_cache_size, self._build_method, on_evict=self._evicted)
        self._uses: dict[int, int] = {}  # id(method) -> checks running with it
        self._retired: weakref.WeakSet[Method] = weakref.WeakSet()  # evicted: closed once no check uses them
        self._uses_lock = threading.Lock()
        self.metrics.method_cache_size.set_function(lambda: len(self.methods))
        self.metrics.in_flight.set_function(lambda: self.admission.in_flight)
        self.metrics.bind(self._queue_depth, self._job_counts)
        self.jobs_db = Path(settings.jobs_db) if settings.jobs_db else default_jobs_db(config)
        for root in (
            settings.data_dir,
            settings.datasets_dir,
            self.jobs_db.parent,
            Path(config.cache_path).parent,
            config.prompts_dir,
            Path.home(),
            Path.cwd(),
        ):
            register_root(root)
        self.store: JobStoreAPI | None = None
        self.runner: JobRunnerAPI | None = None
        self.replica = f"{socket.gethostname()}-{os.getpid()}-{self.boot_id}"  # its consumer name on a shared queue
        self.open_requests = 0
        self.routes: list[Any] = []  # the app's routes, for route templates in metrics and limits
        self._llm = llm
        self._llm_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._runner_future: Any = None

    # --- lifecycle ----------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self.runner is not None

    def ensure_started(self) -> None:
        """Warm up (:func:`warm_up`), start the workers, open the job store and resume its jobs (once; also
        without a lifespan)."""
        if self.runner is not None:
            return
        with self._start_lock:
            if self.runner is not None:
                return
            warm_up()  # before ready: a broken install fails the start, and first-use imports are paid here
            if self.cpu is not None:
                try:
                    self.cpu.start()  # its processes import the same before ready
                except Exception as exc:  # noqa: BLE001 - e.g. a script that starts the app unguarded by __main__
                    self.cpu.stop()
                    self.cpu = None
                    event(
                        logging.WARNING,
                        "no check worker processes: no-LLM checks run on the worker threads",
                        reason=f"{type(exc).__name__}: {exc}",
                    )
            on_item = lambda ok: self.metrics.job_items.labels("report" if ok else "error").inc()  # noqa: E731
            store: JobStoreAPI
            runner: JobRunnerAPI
            if self.settings.jobs_url:  # jobs shared by every replica on the same Redis
                from halluscope.server.jobs.queue_runner import QueueRunner
                from halluscope.server.jobs.redis_store import RedisJobStore

                redis_store = store = RedisJobStore(self.settings.jobs_url)
                runner = QueueRunner(
                    redis_store,
                    build_method=self._method_for_job,
                    run_item=self._job_item,
                    max_running=self.settings.max_running_jobs,
                    concurrency=self.settings.job_concurrency,
                    lease_s=self.settings.job_lease_s,
                    consumer=self.replica,
                    max_attempts=self.settings.job_item_attempts,
                    on_item=on_item,
                    on_event=self.metrics.queue_event,
                )
                self.metrics.bind_queue(self.replica, redis_store.queue_stats)
                where = repr(redis_store)
            else:
                sqlite_store = store = JobStore(self.jobs_db)
                runner = JobRunner(
                    sqlite_store,
                    build_method=self._method_for_job,
                    run_item=self._job_item,
                    max_running=self.settings.max_running_jobs,
                    concurrency=self.settings.job_concurrency,
                    on_item=on_item,
                    max_attempts=self.settings.job_item_attempts,
                )
                where = str(self.jobs_db)
            self.pool.start()
            self.store = store
            self._runner_future = self.pool.submit(runner.main(), worker=0)
            self.runner = runner
            event(
                logging.INFO,
                "service started",
                boot_id=self.boot_id,
                jobs_db=where,
                workers=self.pool.n,
                cpu_workers=self.cpu.pids() if self.cpu is not None else [],
                pid=os.getpid(),
                replica=self.replica,
            )

    def stop(self, wait: bool = True) -> None:
        """Stop the jobs (they go back to the queue), the workers and the store. ``wait=False`` (an app
        dropped without its lifespan, maybe from a garbage collection on a worker thread) only signals them."""
        with self._start_lock:
            runner, store = self.runner, self.store
            self.runner = None
            if runner is not None and runner.loop is not None:
                try:
                    grace = self.settings.shutdown_grace_s if wait else 0.0
                    done = asyncio.run_coroutine_threadsafe(runner.stop(grace), runner.loop)
                    if wait:
                        done.result(grace + 10)
                except Exception:  # noqa: BLE001 - shutting down: the next start requeues anyway
                    pass
            self.pool.stop(timeout_s=10.0 if wait else 0.0)
            if self.cpu is not None:
                self.cpu.stop(grace_s=2.0 if wait else 0.0)
            if store is not None and wait:
                store.close()
                self.store = None

    def _queue_depth(self) -> dict[str, float]:
        try:
            pending = self.store.counts()["pending_items"] if self.store is not None else 0
        except JobStoreUnavailable:  # a scrape while Redis is away: no job gauges rather than a failed scrape
            return {"requests": self.admission.queued}
        return {"requests": self.admission.queued, "job_items": pending}

    def _job_counts(self) -> dict[str, float]:
        if self.store is None:
            return {}
        try:
            counts = self.store.counts()
        except JobStoreUnavailable:
            return {}
        counts.pop("pending_items")
        return counts

    # --- methods ------------------------------------------------------------------------------------

    def _shared_llm(self) -> LLM:
        with self._llm_lock:
            if self._llm is None:
                try:
                    self._llm = get_llm(self.config)
                except (ValueError, LLMError, ImportError, OSError) as exc:
                    raise BackendUnavailable(str(exc)) from exc
            return self._llm

    def allowed_models(self) -> set[str]:
        """The model names a request may use: the operator's list, the server's own model, the default
        embedding model."""
        from halluscope.retrieval.config import DEFAULT_EMBEDDING_MODEL

        own = {self.config.model or "embedded", DEFAULT_EMBEDDING_MODEL}
        if self._llm is not None:
            own.add(self._llm.name)
        return own | set(self.settings.allowed_models)

    def _build_method(self, name: str, options: dict[str, Any]) -> Method:
        refuse_unlisted(options, self.allowed_models())  # before anything is built or loaded
        cls = method_class(name)  # KeyError: unknown method
        try:
            llm = self._shared_llm() if cls.uses_llm else None
        except BackendUnavailable:  # a composition with no LLM stage runs without the model
            method = get_method(name, config=self.config, **options)
            if method.uses_llm:
                raise
        else:
            method = get_method(name, llm=llm, config=self.config, **options)
        self._recipes[method] = (name, dict(options))  # how a worker process builds the same instance
        return method

    def resolve(self, name: str | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The method a request runs and its options: the named one as given; with none named the operator's
        ``default_method`` (with the request's options alone), else what ``halluscope check`` runs
        (:func:`~halluscope.config.resolve_method` on the config's ``method``: with none set, ``dcr`` with
        ``order=verdict_first`` under the request's options)."""
        if name:
            return name, dict(options)
        if self.settings.default_method:
            return self.settings.default_method, dict(options)
        return resolve_method(self.config.method, options)

    def capped(self, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` with ``max_calls`` within the operator's ceiling (``ServerSettings.max_calls``): a request
        may lower the budget of one check, never raise it; a request's 0 ("no limit") and a config budget above
        the ceiling both become the ceiling. A value that is not a whole number is left for the method to refuse."""
        ceiling = self.settings.max_calls
        if ceiling <= 0:
            return options
        asked = options.get("max_calls")
        if asked is None:
            budget = self.config.max_calls  # what the method runs with when the request names none
        elif isinstance(asked, str) and asked.strip().isdigit():
            budget = int(asked.strip())
        elif isinstance(asked, int) and not isinstance(asked, bool) and asked >= 0:
            budget = asked
        else:
            return options
        capped = ceiling if budget == 0 else min(budget, ceiling)
        if asked is None and capped == budget:
            return options
        return {**options, "max_calls": capped}

    async def method(self, name: str, options: dict[str, Any]) -> Method:
        """The (cached) instance, its ``max_calls`` within the operator's ceiling (:meth:`capped`); 400 for an
        unknown method or bad options, 403 for a model the operator did not allow (checked before anything is
        built or loaded), 503 when the model is unusable."""
        options = self.capped(options)
        try:
            refuse_unlisted(options, self.allowed_models())
            return await asyncio.to_thread(self.methods.get, name, options)
        except ModelNotAllowed as exc:
            raise ClientError(403, str(exc)) from None
        except KeyError as exc:
            raise ClientError(400, str(exc.args[0]) if exc.args else "unknown method") from None
        except BackendUnavailable as exc:
            raise ClientError(503, f"the model backend is unavailable: {exc}") from None
        except (ValueError, TypeError) as exc:  # OptionsError, pydantic ValidationError, a constructor's own check
            raise ClientError(400, str(exc)) from None

    def _evicted(self, method: Method) -> None:
        """An instance left the cache: close what it built now, or when its last running check ends. (A job or
        request still holding it may run it again later: it reopens lazily and is closed again after.)"""
        self.metrics.method_cache_evictions.inc()
        with self._uses_lock:
            self._retired.add(method)
            busy = self._uses.get(id(method), 0) > 0
        if not busy:
            self._close_method(method)

    def _close_method(self, method: Method) -> None:
        try:
            method.close()
        except Exception:  # noqa: BLE001 - releasing resources must never fail a request
            logging.getLogger("halluscope.server").warning("closing an evicted method failed", exc_info=True)

    async def _method_for_job(self, name: str, options: dict[str, Any]) -> Method:
        return await asyncio.to_thread(self.methods.get, name, self.capped(options))

    # --- checks -------------------------------------------------------------------------------------

    def check_size(self, source: str, target: str, where: str = "") -> None:
        if len(source) + len(target) > self.settings.max_chars:
            raise ClientError(413, f"{where}source + target exceed {self.settings.max_chars} characters")

    async def _on_worker(
        self,
        method: Method,
        example: Example,
        origin: str,
        rid: str | None,
        render: Callable[[Report], T],
        labelled: bool = False,
    ) -> T:
        """Check one pair on a worker loop, within the time limit; ``render`` (run there too) shapes the answer
        within what is left of it (:func:`check_deadline`; an HTML report past it is a 504, not a running thread)."""
        request_id.set(rid)
        _deadline.set(time.monotonic() + self.settings.timeout_s)
        with self._uses_lock:
            self._uses[id(method)] = self._uses.get(id(method), 0) + 1
        try:
            report = await asyncio.wait_for(self._checked(method, example, labelled), self.settings.timeout_s)
        except TimeoutError:
            raise CheckFailed(504, f"check took longer than {self.settings.timeout_s:.0f}s") from None
        except WorkerDied as exc:
            raise CheckFailed(500, str(exc)) from None
        except InputError as exc:
            if origin != "job":
                raise CheckFailed(422, str(exc)) from None
            # a job item with bad input is an unscored item with the reason, as evaluate() marks such a row
            report = Report(method=method.name, model=method.model_name, unscored_reason=f"bad input: {exc}")
        except _CLIENT_RUN_ERRORS as exc:
            logging.getLogger("halluscope.server").warning("check failed on its options", exc_info=True)
            raise CheckFailed(
                422, redact_paths(f"{method.name} could not run with these options: {type(exc).__name__}: {exc}")
            ) from None
        except RemoteError as exc:  # raised in a worker process
            if exc.kind != "options":
                raise
            logging.getLogger("halluscope.server").warning("check failed on its options: %s", exc)
            raise CheckFailed(422, redact_paths(f"{method.name} could not run with these options: {exc}")) from None
        finally:
            with self._uses_lock:
                left = self._uses[id(method)] - 1
                if left:
                    self._uses[id(method)] = left
                else:
                    del self._uses[id(method)]
                close = not left and method in self._retired
            if close:
                self._close_method(method)
        chunks = example.meta.get("source_chunks")
        if chunks:  # the source was sent as a list of chunks: every piece of evidence names its chunk
            from halluscope.contexts import attribute_chunks
            from halluscope.records import Span

            report = attribute_chunks(report, [Span(start=a, end=b) for a, b in chunks], example.source)
        self.metrics.observe_report(report, origin)
        report = redact_report(report, paths=True)  # no server path or credential reaches the caller
        try:
            return render(report)
        except RenderTimeout:
            raise CheckFailed(
                504,
                f"the check finished but its HTML report ({len(report.findings)} findings) did not fit in the time "
                f"limit of {self.settings.timeout_s:g}s and was stopped; ask for the JSON report (format=json)",
            ) from None

    async def _checked(self, method: Method, example: Example, labelled: bool) -> Report:
        """The check itself: in a worker process when the method calls no LLM (:mod:`halluscope.server.cpu_pool`),
        else here."""
        recipe = self._recipes.get(method)
        if self.cpu is not None and recipe is not None and self.cpu.takes(method, recipe[1]):
            try:
                return await self.cpu.check(method, recipe, example, labelled)
            except NotInWorker as exc:
                event(logging.INFO, "method runs on the threads: a worker process cannot build it", reason=str(exc))
        return await (method.acheck_example(example) if labelled else method.acheck(example.source, example.target))

    async def run_check(
        self, method: Method, example: Example, origin: str, render: Callable[[Report], T], labelled: bool = False
    ) -> T:
        """Run on a worker; the HTTP loop waits (at most the time limit plus a grace)."""
        future = self.pool.run(self._on_worker(method, example, origin, request_id.get(), render, labelled))
        try:
            return await asyncio.wait_for(future, self.settings.timeout_s + _GRACE_S)
        except TimeoutError:
            raise CheckFailed(504, f"check took longer than {self.settings.timeout_s:.0f}s") from None

    async def check(self, method: Method, source: str | list[str], target: str, render: Callable[[Report], T]) -> T:
        text, meta = joined_source(source)
        try:
            return await self.run_check(method, Example(id="0", source=text, target=target, meta=meta), "check", render)
        except CheckFailed as exc:
            self.metrics.check_errors.labels(method.name, str(exc.status)).inc()
            raise ClientError(exc.status, str(exc)) from None

    # --- batches ------------------------------------------------------------------------------------

    def validate_items(self, items: list[Pair], limit: int, what: str) -> list[Example]:
        if len(items) > limit:
            raise ClientError(413, f"{len(items)} items in one {what}; at most {limit}")
        examples = []
        for i, item in enumerate(items):
            where = f"item {i}{f' ({item.id})' if item.id else ''}: "
            source, meta = joined_source(item.source)
            self.check_size(source, item.target, where)
            if what != "job":  # a job keeps a bad item: it becomes an unscored item with the reason
                try:
                    validate_pair(source, item.target)
                except InputError as exc:
                    raise ClientError(422, f"{where}{exc}") from None
            examples.append(
                Example(id=item.id if item.id is not None else str(i), source=source, target=item.target, meta=meta)
            )
        return examples

    async def _batch_line(self, method: Method, index: int, example: Example, item_id: str | None) -> bytes:
        def render(report: Report) -> bytes:
            return result_line(index, item_id, 200, report.model_dump_json(), None)

        try:
            return await self.run_check(method, example, "batch", render)
        except CheckFailed as exc:
            self.metrics.check_errors.labels(method.name, str(exc.status)).inc()
            return result_line(index, item_id, exc.status, None, redact_paths(str(exc)))
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: the other items still get their lines
            logging.getLogger("halluscope.server").exception("batch item failed")
            self.metrics.check_errors.labels(method.name, "500").inc()
            return result_line(index, item_id, 500, None, f"internal error (request id {request_id.get()})")

    async def batch(self, method: Method, examples: list[Example]) -> AsyncIterator[bytes]:
        """One NDJSON line per item, in the order they finish, at most ``batch_concurrency`` at a time."""
        queue = iter(enumerate(examples))
        pending: set[asyncio.Task[bytes]] = set()

        def launch() -> None:
            while len(pending) < self.settings.batch_concurrency:
                nxt = next(queue, None)
                if nxt is None:
                    return
                i, example = nxt
                pending.add(asyncio.ensure_future(self._batch_line(method, i, example, example.id)))

        try:
            launch()
            while pending:
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    pending.discard(task)
                    yield task.result()
                launch()
        finally:  # the client went away: stop the items still running
            for task in pending:
                task.cancel()

    # --- jobs ---------------------------------------------------------------------------------------

    async def _job_item(self, method: Method, example: Example, job_id: str) -> tuple[Report, str]:
        request_id.set(f"job-{job_id[:8]}")
        try:
            return await self.run_check(method, example, "job", lambda r: (r, r.model_dump_json()), labelled=True)
        except CheckFailed as exc:
            self.metrics.check_errors.labels(method.name, str(exc.status)).inc()
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: recorded on the item, the job goes on
            logging.getLogger("halluscope.server").exception("job item failed")
            raise CheckFailed(500, redact_paths(f"internal error: {type(exc).__name__}: {exc}")) from None

    def _load_dataset(self, spec: str) -> tuple[str, list[Example]]:
        from halluscope.bench.datasets import DatasetError, dataset_loaders, load_dataset

        LOADERS = dataset_loaders()  # the built-in datasets and those of installed plugins
        looks_like_file = spec.endswith(".jsonl") or "/" in spec or os.sep in spec
        if looks_like_file:
            root = self.settings.datasets_dir
            if root is None:
                raise ClientError(
                    400,
                    "this server reads no dataset files (start it with --datasets-dir); "
                    f"name a dataset ({', '.join(LOADERS)}) or send `items`",
                )
            root = Path(root).resolve()
            path = (root / spec).resolve()
            if not path.is_relative_to(root):
                raise ClientError(400, "dataset files are read only inside the server's datasets folder")
            if not path.is_file():
                raise ClientError(400, f"dataset file not found: {spec}")
            spec = str(path)
        elif spec.partition(":")[0] not in LOADERS:
            raise ClientError(
                400,
                f"unknown dataset {spec!r}; use one of {', '.join(LOADERS)}"
                + (" or a .jsonl file in the datasets folder" if self.settings.datasets_dir else ""),
            )
        try:
            dataset = load_dataset(spec, self.settings.data_dir)
        except (DatasetError, OSError) as exc:
            raise ClientError(400, f"cannot load dataset: {exc}") from None
        return dataset.spec, dataset.examples

    async def submit_job(self, req: JobRequest) -> str:
        assert self.store is not None and self.runner is not None
        name, options = self.resolve(req.method, req.options)  # stored resolved: a resumed job runs the same
        options = self.capped(options)  # and within the ceiling, which the job shows
        await self.method(name, options)  # validates the method and options now, not at run time
        if req.items is not None:
            examples = self.validate_items(req.items, self.settings.max_job_items, "job")
            dataset = None
        else:
            assert req.dataset is not None
            dataset, examples = await asyncio.to_thread(self._load_dataset, req.dataset)
            if req.limit is not None:
                examples = examples[: req.limit]
            if not examples:
                raise ClientError(400, f"dataset {dataset} has no items")
            if len(examples) > self.settings.max_job_items:
                raise ClientError(413, f"{len(examples)} items in one job; at most {self.settings.max_job_items}")
            for ex in examples:
                self.check_size(ex.source, ex.target, f"item {ex.id}: ")
        if await asyncio.to_thread(self.store.active_count) >= self.settings.max_jobs:
            raise ClientError(
                429,
                f"{self.settings.max_jobs} jobs are queued or running; retry later",
                {"Retry-After": str(max(self.settings.retry_after_s, 30))},
            )
        job_id = await asyncio.to_thread(self.store.create, name, options, examples, dataset=dataset, name=req.name)
        event(logging.INFO, "job submitted", job_id=job_id, method=name, total=len(examples), dataset=dataset)
        self.runner.notify()
        return job_id

    async def delete_job(self, job_id: str) -> bool:
        assert self.store is not None and self.runner is not None
        deleted = await asyncio.to_thread(self.store.delete, job_id)
        if deleted:
            self.runner.cancel(job_id)
            event(logging.INFO, "job deleted", job_id=job_id)
        return deleted

    def wait_started(self, timeout_s: float = 10.0) -> None:
        """Block until the job runner is looking at the queue (tests, benchmarks)."""
        deadline = time.monotonic() + timeout_s
        while (self.runner is None or self.runner.loop is None) and time.monotonic() < deadline:
            time.sleep(0.01)
