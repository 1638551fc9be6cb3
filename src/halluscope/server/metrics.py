"""Prometheus metrics of one service instance (its own registry, so several apps can live in one process).

Every label has a bounded set of values: routes are templates (``/jobs/{job_id}``), unscored reasons are
reduced to a few classes, methods are registered names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from halluscope.records import Report

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

disable_created_metrics()  # type: ignore[no-untyped-call]  # no `*_created` series: they double the scrape for nothing an SRE reads

# (class, words): the first class whose word occurs in the lower-cased reason wins.
_REASON_CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("timeout", ("timed out", "timeout")),
    ("context_overflow", ("context", "does not fit", "do not fit", "too long")),
    ("llm_error", ("llm error",)),
    ("bad_input", ("bad input", "no gold label")),
    ("unparseable_reply", ("unusable", "parse", "reply", "json", "format", "filter failed")),
    ("nothing_to_check", ("no claims", "no sentences", "no a-z", "found no", "none of the", "no facts")),
)
REASON_CLASSES = tuple(name for name, _ in _REASON_CLASSES) + ("other",)

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
HTTP_METHODS = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"})


def reason_class(reason: str | None) -> str:
    """A bounded bucket for an unscored reason (the full text stays on the Report)."""
    text = (reason or "").lower()
    for name, words in _REASON_CLASSES:
        if any(w in text for w in words):
            return name
    return "other"


class _Callback(Collector):
    """Gauges computed at scrape time (queue depths, jobs by status)."""

    def __init__(self, collect: Callable[[], Iterable[GaugeMetricFamily]]):
        self._collect = collect

    def collect(self) -> Iterable[GaugeMetricFamily]:
        return self._collect()


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "halluscope_http_requests",
            "HTTP requests answered, by route template, method and status.",
            ["route", "method", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "halluscope_http_request_duration_seconds",
            "Time from the request's arrival to the end of its response, by route.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.refused = Counter(
            "halluscope_http_refused", "Requests refused before a handler ran, by reason.", ["reason"], registry=r
        )
        self.checks = Histogram(
            "halluscope_check_duration_seconds",
            "Time of one check (a pair), by method and origin.",
            ["method", "origin"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.reports = Counter(
            "halluscope_reports",
            "Reports produced, by method, origin (check, batch, job) and outcome.",
            ["method", "origin", "outcome"],
            registry=r,
        )
        self.unscored = Counter(
            "halluscope_unscored_reports",
            "Reports without a score, by method and reason class.",
            ["method", "reason"],
            registry=r,
        )
        self.check_errors = Counter(
            "halluscope_check_errors",
            "Checks that ended without a report, by method and HTTP status.",
            ["method", "status"],
            registry=r,
        )
        self.llm_calls = Counter(
            "halluscope_llm_calls", "LLM requests that reached a model, by method.", ["method"], registry=r
        )
        self.llm_tokens = Counter(
            "halluscope_llm_tokens",
            "LLM tokens, by method and kind (prompt, completion).",
            ["method", "kind"],
            registry=r,
        )
        self.cache_hits = Counter(
            "halluscope_llm_cache_hits",
            "LLM replies answered from the response cache, by method.",
            ["method"],
            registry=r,
        )
        self.method_cache_evictions = Counter(
            "halluscope_method_cache_evictions", "Method instances evicted from the bounded cache.", registry=r
        )
        self.job_items = Counter(
            "halluscope_job_items", "Job items finished, by outcome (report, error).", ["outcome"], registry=r
        )
        self.in_flight = Gauge(
            "halluscope_checks_in_flight", "Checks holding a slot (/check, /improve, /check/batch).", registry=r
        )
        self.open_requests = Gauge("halluscope_open_requests", "Requests being handled (all routes).", registry=r)
        self.method_cache_size = Gauge(
            "halluscope_method_cache_size", "Method instances in the bounded cache.", registry=r
        )
        self.queue_items = Counter(
            "halluscope_job_queue_items",
            "Job items on the shared queue (--jobs-url) handled by this replica, by event: "
            "claimed, retried (taken over after another replica's lease expired), done "
            "(result written), duplicate (another replica wrote it first), lease_lost "
            "(this replica's lease expired while it ran the item), dead_letter (recorded unscored without "
            "running: unreadable, or handed out too often).",
            ["event"],
            registry=r,
        )
        ProcessCollector(registry=r)  # process_resident_memory_bytes, process_open_fds, ...
        self._queue_depth: Callable[[], dict[str, float]] = dict
        self._jobs: Callable[[], dict[str, float]] = dict
        self._replica: str | None = None
        self._queue_jobs: Callable[[], dict[str, dict[str, float]]] = dict
        r.register(_Callback(self._collect_callbacks))

    def bind(self, queue_depth: Callable[[], dict[str, float]], jobs: Callable[[], dict[str, float]]) -> None:
        """Sources of the scrape-time gauges: queue depth by queue, jobs by status."""
        self._queue_depth, self._jobs = queue_depth, jobs

    def bind_queue(self, replica: str, per_job: Callable[[], dict[str, dict[str, float]]]) -> None:
        """Jobs on a shared queue: this replica's name, and the per-job item counts of the active jobs."""
        self._replica, self._queue_jobs = replica, per_job
        for name in ("claimed", "retried", "done", "duplicate", "lease_lost", "dead_letter"):
            self.queue_items.labels(name)  # every series present from the start (rate() needs a zero)

    def queue_event(self, name: str, n: int = 1) -> None:
        self.queue_items.labels(name).inc(n)

    def _collect_callbacks(self) -> Iterable[GaugeMetricFamily]:
        queue = GaugeMetricFamily(
            "halluscope_queue_depth",
            "Work waiting: requests for a check slot, job items not yet finished.",
            labels=["queue"],
        )
        for name, value in self._queue_depth().items():
            queue.add_metric([name], value)
        yield queue
        jobs = GaugeMetricFamily("halluscope_jobs", "Jobs in the store, by status.", labels=["status"])
        for name, value in self._jobs().items():
            jobs.add_metric([name], value)
        yield jobs
        if self._replica is not None:
            info = GaugeMetricFamily(
                "halluscope_replica_info", "This replica's consumer name on the shared job queue.", labels=["replica"]
            )
            info.add_metric([self._replica], 1)
            yield info
            per_job = GaugeMetricFamily(
                "halluscope_job_queue_job_items",
                "Per queued or running job (at most --max-jobs series sets), over all replicas: items total, done, "
                "in_flight (claimed, no result yet), claims (deliveries) and takeovers (lease expiries).",
                labels=["job_id", "kind"],
            )
            try:
                stats = self._queue_jobs()
            except Exception:  # noqa: BLE001 - the queue unreachable: the scrape still answers
                stats = {}
            for job_id, kinds in stats.items():
                for kind, value in kinds.items():
                    per_job.add_metric([job_id, kind], value)
            yield per_job

    def observe_report(self, report: Report, origin: str) -> None:
        method = report.method
        self.checks.labels(method, origin).observe(report.elapsed_s)
        u = report.usage
        self.llm_calls.labels(method).inc(u.calls)
        self.llm_tokens.labels(method, "prompt").inc(u.prompt_tokens)
        self.llm_tokens.labels(method, "completion").inc(u.completion_tokens)
        self.cache_hits.labels(method).inc(u.cache_hits)
        if report.score is None:
            self.reports.labels(method, origin, "unscored").inc()
            self.unscored.labels(method, reason_class(report.unscored_reason)).inc()
        else:
            self.reports.labels(method, origin, "scored").inc()

    def observe_request(self, route: str, http_method: str, status: int, seconds: float) -> None:
        http_method = http_method if http_method in HTTP_METHODS else "OTHER"
        self.requests.labels(route, http_method, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
