"""Jobs in Redis, shared by every replica of the service: items on a Redis Streams consumer group.

Each job is a stream of its item indexes with one consumer group (``workers``); every replica is a consumer
(named host-pid-boot). A replica claims items with ``XREADGROUP`` (new ones) and takes over items whose
lease expired with ``XPENDING ... IDLE`` + ``XCLAIM`` (the owner died, or stalled past the lease); while it
works on an item it renews the lease (``XCLAIM ... JUSTID`` by the owner resets the entry's idle time). The
result is written by a Lua script that stores it with ``HSETNX``, adds to the job's counts and ``XACK``\\ s
the entry, all at once: however many replicas raced for an item, its result and counts are written once.

Keys (``prefix`` defaults to ``halluscope:jobs:``; ``?prefix=team-a:jobs:`` in the URL keeps teams apart):

=========================  ======  ==============================================================
``<p>all``                 zset    every job id, scored by creation time (``GET /jobs``)
``<p>active``              zset    queued or running jobs (what replicas look at for work)
``<p>finished``            hash    finished jobs by status (``done``, ``failed``), for the metrics
``<p>job:<id>``            hash    the job: status, method, options, total, counts, usage, attempts
``<p>job:<id>:items``      hash    index -> the Example's JSON (copied in at submission)
``<p>job:<id>:eids``       list    the examples' ids in index order (the job page)
``<p>job:<id>:q``          stream  one entry per item (``i`` = index); group ``workers``; deleted when done
``<p>job:<id>:results``    hash    index -> the result (status, Report JSON or error, attempt, time)
``<p>job:<id>:sums``       hash    index -> score, label, findings, reason (the job page, without Reports)
``<p>job:<id>:lost``       set     replicas whose leases on this job expired (each one counts an attempt)
=========================  ======  ==============================================================

Needs Redis 7.0 or later (the scripts call ``XREADGROUP``, allowed in scripts since 7.0); a single server
or a managed primary endpoint (not Redis Cluster: a job's scripts touch the global keys too).
"""

from __future__ import annotations

import builtins
import json
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from halluscope.llm.cache import REDIS_SCHEMES, _redact
from halluscope.records import Example, Report, Usage
from halluscope.server.jobs.base import HeldItem, JobStoreUnavailable
from halluscope.server.jobs.store import ACTIVE, _job, _read_example

GROUP = "workers"
DEFAULT_PREFIX = "halluscope:jobs:"
MIN_REDIS = (7, 0)
_CHUNK = 1000  # items per command when a job is created

# KEYS: meta, q, items, results, lost   ARGV: consumer, count, lease ms, now
# -> flat list: entry id, index, example JSON ('' when missing), attempt, 1 if taken over else 0, ...
_CLAIM = """
local meta, q, items, results, lost = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local me, want, lease, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
if redis.call('EXISTS', q) == 0 then return {} end
local status = redis.call('HGET', meta, 'status')
if status ~= 'queued' and status ~= 'running' then return {} end
local total = tonumber(redis.call('HGET', meta, 'total') or '0')
local out, n, took = {}, 0, 0
local function add(id, fields, attempt, takeover)
  local idx = fields[2]
  local i = tonumber(idx)
  local foreign = fields[1] ~= 'i' or not i or i < 0 or i >= total or i ~= math.floor(i)
  if foreign or redis.call('HEXISTS', results, idx) == 1 then
    redis.call('XACK', q, 'workers', id)  -- not an item of this job, or done already
    return
  end
  -- an item whose data is gone is handed out with an empty example: the replica records it unscored
  local example = redis.call('HGET', items, idx) or ''
  out[#out + 1] = id; out[#out + 1] = idx; out[#out + 1] = example
  out[#out + 1] = attempt; out[#out + 1] = takeover
  n = n + 1
end
local stale = redis.call('XPENDING', q, 'workers', 'IDLE', lease, '-', '+', want)
for _, p in ipairs(stale) do
  local id, owner, deliveries = p[1], p[2], p[4]
  local got = redis.call('XCLAIM', q, 'workers', me, lease, id)
  if got[1] then
    if owner ~= me then
      took = took + 1
      if redis.call('SADD', lost, owner) == 1 then redis.call('HINCRBY', meta, 'attempts', 1) end
    end
    add(id, got[1][2], deliveries + 1, owner ~= me and 1 or 0)
  end
end
if n < want then
  local got = redis.call('XREADGROUP', 'GROUP', 'workers', me, 'COUNT', want - n, 'STREAMS', q, '>')
  if got then
    for _, e in ipairs(got[1][2]) do add(e[1], e[2], 1, 0) end
  end
end
if n > 0 then
  if status == 'queued' then
    redis.call('HSET', meta, 'status', 'running')
    redis.call('HSETNX', meta, 'started', now)
    if tonumber(redis.call('HGET', meta, 'attempts') or '0') == 0 then redis.call('HSET', meta, 'attempts', 1) end
  end
  redis.call('HINCRBY', meta, 'claims', n)
  if took > 0 then redis.call('HINCRBY', meta, 'takeovers', took) end
end
return out
"""

# KEYS: q   ARGV: consumer, entry ids...   -> the ids this consumer no longer holds
_RENEW = """
local q, me = KEYS[1], ARGV[1]
local lost = {}
if redis.call('EXISTS', q) == 0 then return lost end  -- the job was deleted (or is done): nothing to renew
for i = 2, #ARGV do
  local id = ARGV[i]
  if #redis.call('XPENDING', q, 'workers', id, id, 1, me) == 1 then
    redis.call('XCLAIM', q, 'workers', me, 0, id, 'JUSTID')
  else
    lost[#lost + 1] = id
  end
end
return lost
"""

# KEYS: q   ARGV: consumer, idle ms, entry ids...   (hand items back: the next scan of any replica takes them)
_RELEASE = """
local q, me, idle = KEYS[1], ARGV[1], ARGV[2]
if redis.call('EXISTS', q) == 0 then return 0 end
local n = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  if #redis.call('XPENDING', q, 'workers', id, id, 1, me) == 1 then
    redis.call('XCLAIM', q, 'workers', me, 0, id, 'IDLE', idle, 'JUSTID')
    n = n + 1
  end
end
return n
"""

# KEYS: meta, q, results, sums, active, finished
# ARGV: job id, entry id, index, result JSON, summary JSON, scored, unscored, errors, score, calls,
#       prompt tokens, completion tokens, cache hits, now
# -> -1 job gone, 0 already had a result (nothing written), 1 written, 2 written and the job is done
_COMPLETE = """
local meta, q, results, sums, active, finished = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
if redis.call('EXISTS', meta) == 0 then return -1 end
if redis.call('HSETNX', results, ARGV[3], ARGV[4]) == 0 then
  if redis.call('EXISTS', q) == 1 then redis.call('XACK', q, 'workers', ARGV[2]) end
  return 0
end
redis.call('HSET', sums, ARGV[3], ARGV[5])
redis.call('HINCRBY', meta, 'scored', ARGV[6])
redis.call('HINCRBY', meta, 'unscored', ARGV[7])
redis.call('HINCRBY', meta, 'errors', ARGV[8])
redis.call('HINCRBYFLOAT', meta, 'score_sum', ARGV[9])
redis.call('HINCRBY', meta, 'calls', ARGV[10])
redis.call('HINCRBY', meta, 'prompt_tokens', ARGV[11])
redis.call('HINCRBY', meta, 'completion_tokens', ARGV[12])
redis.call('HINCRBY', meta, 'cache_hits', ARGV[13])
if redis.call('EXISTS', q) == 1 then redis.call('XACK', q, 'workers', ARGV[2]) end
local done = redis.call('HINCRBY', meta, 'done', 1)
if done >= tonumber(redis.call('HGET', meta, 'total')) then
  local status = redis.call('HGET', meta, 'status')
  if status == 'queued' or status == 'running' then
    redis.call('HSET', meta, 'status', 'done', 'finished', ARGV[14])
    redis.call('ZREM', active, ARGV[1])
    redis.call('HINCRBY', finished, 'done', 1)
  end
  redis.call('DEL', q)
  return 2
end
return 1
"""

# KEYS: meta, q, active, finished   ARGV: job id, status, error, now   -> 1 finished now, 0 not active
_FINISH = """
local meta, q, active, finished = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local status = redis.call('HGET', meta, 'status')
if status ~= 'queued' and status ~= 'running' then return 0 end
redis.call('HSET', meta, 'status', ARGV[2], 'finished', ARGV[4], 'error', ARGV[3])
redis.call('ZREM', active, ARGV[1])
redis.call('HINCRBY', finished, ARGV[2], 1)
redis.call('DEL', q)
return 1
"""

# KEYS: meta, all, active, finished, then the job's other keys   ARGV: job id   -> 1 deleted, 0 no such job
_DELETE = """
local meta, all, active, finished = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local status = redis.call('HGET', meta, 'status')
if not status then return 0 end
if status ~= 'queued' and status ~= 'running' then redis.call('HINCRBY', finished, status, -1) end
for i = 5, #KEYS do redis.call('DEL', KEYS[i]) end
redis.call('DEL', meta)
redis.call('ZREM', all, ARGV[1])
redis.call('ZREM', active, ARGV[1])
return 1
"""

_INT_FIELDS = (
    "total",
    "attempts",
    "done",
    "scored",
    "unscored",
    "errors",
    "calls",
    "prompt_tokens",
    "completion_tokens",
    "cache_hits",
)
_FLOAT_FIELDS = ("created", "started", "finished", "score_sum")
_JOB_FIELDS = ("id", "status", "name", "method", "options", "dataset", "error", *_INT_FIELDS, *_FLOAT_FIELDS)


@dataclass(frozen=True)
class Lease:
    """An item this replica holds a lease on: its stream entry, index, example, and which delivery this is.
    ``example`` is None when the stored item cannot be read; ``unreadable`` then says why (the runner records
    the item unscored with that reason instead of running it)."""

    entry_id: str
    index: int
    example: Example | None
    attempt: int
    takeover: bool  # taken from another replica whose lease expired
    unreadable: str | None = None


def _stored_example(raw: str) -> tuple[Example | None, str | None]:
    """The stored item, or None and the reason it cannot be read (missing, not JSON, not an Example)."""
    read = _read_example(raw) if raw else "its data is missing from the job store"
    return (read, None) if isinstance(read, Example) else (None, read)


def parse_jobs_url(url: str) -> tuple[str, str]:
    """The Redis URL without halluscope's own options, and the key prefix (``?prefix=``)."""
    parts = urlsplit(url)
    if parts.scheme not in REDIS_SCHEMES:
        raise ValueError(f"not a Redis URL: {_redact(url)} (use redis://, rediss:// or unix://)")
    query = dict(parse_qsl(parts.query))
    prefix = query.pop("prefix", None) or DEFAULT_PREFIX
    return urlunsplit(parts._replace(query=urlencode(query))), prefix


class RedisJobStore:
    """The jobs of every replica that opens the same URL and prefix. Thread-safe (redis-py's pool).

    A connection error after redis-py's bounded retries raises :class:`JobStoreUnavailable` (the routes
    answer 503); the server is pinged and its version checked on construction, so a wrong URL fails the
    start with a clear message."""

    def __init__(self, url: str, *, socket_timeout_s: float = 10.0):
        try:
            import redis
            from redis.backoff import ExponentialWithJitterBackoff
            from redis.retry import Retry
        except ImportError as exc:
            raise JobStoreUnavailable("jobs in Redis need the redis client: pip install 'halluscope[redis]'") from exc
        self.url, self.prefix = parse_jobs_url(url)
        self._redis = redis
        self._errors = (redis.ConnectionError, redis.TimeoutError)
        try:
            self._client = redis.Redis.from_url(
                self.url,
                decode_responses=True,
                socket_timeout=socket_timeout_s,
                socket_connect_timeout=socket_timeout_s,
                retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), 3),
                retry_on_error=[redis.ConnectionError, redis.TimeoutError],
                health_check_interval=30,
            )
            version = str(self._client.info("server").get("redis_version", "0"))
        except (redis.RedisError, ValueError) as exc:
            raise JobStoreUnavailable(
                f"cannot reach the jobs Redis at {_redact(url)}: {type(exc).__name__}: {exc}"
            ) from exc
        if tuple(int(p) for p in version.split(".")[:2] if p.isdigit()) < MIN_REDIS:
            raise JobStoreUnavailable(
                f"jobs in Redis need Redis {'.'.join(map(str, MIN_REDIS))} or later; {_redact(url)} runs {version}"
            )
        c = self._client
        self._claim, self._renew, self._release = (
            c.register_script(_CLAIM),
            c.register_script(_RENEW),
            c.register_script(_RELEASE),
        )
        self._complete, self._finish, self._delete = (
            c.register_script(_COMPLETE),
            c.register_script(_FINISH),
            c.register_script(_DELETE),
        )

    def __repr__(self) -> str:
        return f"RedisJobStore({_redact(self.url)!r}, prefix={self.prefix!r})"

    # --- keys ---------------------------------------------------------------------------------------

    def _k(self, job_id: str, part: str = "") -> str:
        return f"{self.prefix}job:{job_id}{':' + part if part else ''}"

    def _job_keys(self, job_id: str) -> builtins.list[str]:
        return [self._k(job_id, p) for p in ("q", "items", "eids", "results", "sums", "lost")]

    @property
    def _all(self) -> str:
        return self.prefix + "all"

    @property
    def _active(self) -> str:
        return self.prefix + "active"

    @property
    def _finished(self) -> str:
        return self.prefix + "finished"

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except self._errors as exc:
            raise JobStoreUnavailable(f"the jobs Redis is unreachable: {type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        self._client.close()

    # --- jobs ---------------------------------------------------------------------------------------

    def create(
        self,
        method: str,
        options: dict[str, Any],
        examples: builtins.list[Example],
        *,
        dataset: str | None = None,
        name: str | None = None,
    ) -> str:
        """One transaction: the job, its items, its stream and group, then the indexes that make it visible."""
        job_id = uuid.uuid4().hex
        now = time.time()
        meta: dict[str, str | int | float] = {
            "id": job_id,
            "status": "queued" if examples else "done",
            "method": method,
            "options": json.dumps(options, sort_keys=True),
            "total": len(examples),
            "created": repr(now),
            "attempts": 0,
            "done": 0,
            "scored": 0,
            "unscored": 0,
            "errors": 0,
            "score_sum": 0,
            "calls": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "cache_hits": 0,
            "claims": 0,
            "takeovers": 0,
        }
        if name is not None:
            meta["name"] = name
        if dataset is not None:
            meta["dataset"] = dataset
        if not examples:
            meta["finished"] = repr(now)
        pipe = self._client.pipeline(transaction=True)
        pipe.hset(self._k(job_id), mapping=cast(Any, meta))  # redis-py: Mapping is invariant in its key type
        q = self._k(job_id, "q")
        if examples:
            pipe.xgroup_create(q, GROUP, id="0", mkstream=True)
        for start in range(0, len(examples), _CHUNK):
            chunk = examples[start : start + _CHUNK]
            pipe.hset(
                self._k(job_id, "items"), mapping={str(start + i): ex.model_dump_json() for i, ex in enumerate(chunk)}
            )
            pipe.rpush(self._k(job_id, "eids"), *[ex.id for ex in chunk])
            for i in range(start, start + len(chunk)):
                pipe.xadd(q, {"i": i})
        pipe.zadd(self._all, {job_id: now})
        if examples:
            pipe.zadd(self._active, {job_id: now})
        else:
            pipe.hincrby(self._finished, "done", 1)
        self._call(pipe.execute)
        return job_id

    def get(self, job_id: str) -> dict[str, Any] | None:
        raw = self._call(self._client.hgetall, self._k(job_id))
        return _decode_job(raw) if raw else None

    def list(self, limit: int = 100, status: str | None = None) -> builtins.list[dict[str, Any]]:
        out: builtins.list[dict[str, Any]] = []
        start, page = 0, max(limit, 100)
        while len(out) < limit:
            ids = self._call(self._client.zrevrange, self._all, start, start + page - 1)
            if not ids:
                break
            pipe = self._client.pipeline(transaction=False)
            for job_id in ids:
                pipe.hgetall(self._k(job_id))
            for raw in self._call(pipe.execute):
                if raw and (status is None or raw.get("status") == status):
                    out.append(_decode_job(raw))
                    if len(out) == limit:
                        break
            start += page
        return out

    def active_count(self) -> int:
        return int(self._call(self._client.zcard, self._active))

    def active_ids(self) -> builtins.list[str]:
        """Queued or running jobs, oldest first (FIFO across jobs, as the SQLite runner)."""
        return builtins.list(self._call(self._client.zrange, self._active, 0, -1))

    def counts(self) -> dict[str, float]:
        """Jobs by status, and ``pending_items``: items of queued or running jobs without a result."""
        out: dict[str, float] = {s: 0 for s in ("queued", "running", "done", "failed", "cancelled")}
        for status, n in self._call(self._client.hgetall, self._finished).items():
            out[status] = max(0, int(n))
        pending = 0
        for raw in self._active_meta(("status", "total", "done")):
            status, total, done = raw
            if status in ACTIVE:
                out[status] += 1
                pending += int(total or 0) - int(done or 0)
        out["pending_items"] = pending
        return out

    def _active_meta(self, fields: tuple[str, ...]) -> builtins.list[builtins.list[str | None]]:
        ids = self.active_ids()
        pipe = self._client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(self._k(job_id), list(fields))
        return cast(builtins.list[builtins.list[str | None]], self._call(pipe.execute)) if ids else []

    def queue_stats(self) -> dict[str, dict[str, float]]:
        """For each queued or running job: items ``total``, ``done``, ``in_flight`` (claimed, no result yet),
        ``claims`` (deliveries to replicas) and ``takeovers`` (items taken over after a lease expired)."""
        ids = self.active_ids()
        if not ids:
            return {}
        pipe = self._client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(self._k(job_id), ["total", "done", "claims", "takeovers"])
            pipe.exists(self._k(job_id, "q"))
        rows = self._call(pipe.execute)
        pipe = self._client.pipeline(transaction=False)
        live = [job_id for job_id, exists in zip(ids, rows[1::2]) if exists]
        for job_id in live:
            pipe.xpending(self._k(job_id, "q"), GROUP)
        pending = dict(zip(live, (p["pending"] for p in self._call(pipe.execute)))) if live else {}
        out: dict[str, dict[str, float]] = {}
        for job_id, row in zip(ids, rows[0::2]):
            total, done, claims, takeovers = (float(v or 0) for v in row)
            out[job_id] = {
                "total": total,
                "done": done,
                "in_flight": float(pending.get(job_id, 0)),
                "claims": claims,
                "takeovers": takeovers,
            }
        return out

    def finish(self, job_id: str, status: str, error: str | None = None) -> bool:
        """End a queued or running job (``failed`` with its reason); False when it was not active."""
        keys = [self._k(job_id), self._k(job_id, "q"), self._active, self._finished]
        return bool(self._call(self._finish, keys=keys, args=[job_id, status, error or "", repr(time.time())]))

    def delete(self, job_id: str) -> bool:
        keys = [self._k(job_id), self._all, self._active, self._finished, *self._job_keys(job_id)]
        return bool(self._call(self._delete, keys=keys, args=[job_id]))

    # --- the queue ----------------------------------------------------------------------------------

    def claim(self, job_id: str, consumer: str, count: int, lease_s: float) -> builtins.list[Lease]:
        """Up to ``count`` items of the job for ``consumer``: first those whose lease expired (their owner died
        or stalled), then new ones. Items that already have a result are acknowledged and skipped."""
        keys = [
            self._k(job_id),
            self._k(job_id, "q"),
            self._k(job_id, "items"),
            self._k(job_id, "results"),
            self._k(job_id, "lost"),
        ]
        try:
            flat = self._call(self._claim, keys=keys, args=[consumer, count, int(lease_s * 1000), repr(time.time())])
        except self._redis.ResponseError as exc:  # NOGROUP: the job was deleted meanwhile
            if "NOGROUP" in str(exc):
                return []
            raise
        claims = []
        for i in range(0, len(flat), 5):
            example, unreadable = _stored_example(flat[i + 2])
            claims.append(
                Lease(flat[i], int(flat[i + 1]), example, int(flat[i + 3]), bool(int(flat[i + 4])), unreadable)
            )
        return claims

    def renew(self, job_id: str, consumer: str, entry_ids: builtins.list[str]) -> builtins.list[str]:
        """Reset the lease of items ``consumer`` holds; returns those another consumer took over (none when
        the job was deleted or is done: writing their results then changes nothing)."""
        if not entry_ids:
            return []
        try:
            return builtins.list(self._call(self._renew, keys=[self._k(job_id, "q")], args=[consumer, *entry_ids]))
        except self._redis.ResponseError as exc:
            if "NOGROUP" in str(exc):
                return []
            raise

    def release(self, job_id: str, consumer: str, entry_ids: builtins.list[str], lease_s: float) -> int:
        """Hand items back (a draining replica): their lease is marked expired, so any replica takes them now."""
        if not entry_ids:
            return 0
        idle = int(lease_s * 1000) + 1
        try:
            return int(self._call(self._release, keys=[self._k(job_id, "q")], args=[consumer, idle, *entry_ids]))
        except self._redis.ResponseError as exc:
            if "NOGROUP" in str(exc):
                return 0
            raise

    def complete(
        self,
        job_id: str,
        claim: Lease,
        *,
        report: Report | None = None,
        report_json: str | None = None,
        status: int = 200,
        error: str | None = None,
    ) -> int:
        """Write an item's result once: -1 the job is gone, 0 it already had one (written by another replica;
        nothing counted), 1 written, 2 written and the job is now done."""
        usage = report.usage if report is not None else Usage()
        score = report.score if report is not None else None
        scored = score is not None
        now = time.time()
        result = json.dumps(
            {
                "item_id": claim.example.id if claim.example is not None else None,
                "status": status,
                "report": report_json,
                "error": error,
                "attempt": claim.attempt,
                "finished": now,
            },
            ensure_ascii=False,
        )
        summary = json.dumps(
            {
                "status": status,
                "score": report.score if report else None,
                "label": report.label if report else None,
                "findings": len(report.findings) if report else 0,
                "error": error,
                "has": report is not None,
                "reason": report.unscored_reason if report else None,
            },
            ensure_ascii=False,
        )
        keys = [
            self._k(job_id),
            self._k(job_id, "q"),
            self._k(job_id, "results"),
            self._k(job_id, "sums"),
            self._active,
            self._finished,
        ]
        args = [
            job_id,
            claim.entry_id,
            claim.index,
            result,
            summary,
            int(scored),
            int(report is not None and not scored),
            int(report is None),
            repr(score if score is not None else 0.0),
            usage.calls,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cache_hits,
            repr(now),
        ]
        return int(self._call(self._complete, keys=keys, args=args))

    # --- items and results --------------------------------------------------------------------------

    def _total(self, job_id: str) -> int:
        return int(self._call(self._client.hget, self._k(job_id), "total") or 0)

    def results(self, job_id: str, after: int = -1, page: int = 200) -> builtins.list[dict[str, Any]]:
        """Up to ``page`` finished items with index > ``after``, in index order."""
        total = self._total(job_id)
        start = after + 1
        while start < total:
            indexes = list(range(start, min(total, start + page)))
            raw = self._call(self._client.hmget, self._k(job_id, "results"), [str(i) for i in indexes])
            rows = [_result_row(i, r) for i, r in zip(indexes, raw) if r is not None]
            if rows:
                return rows
            start += page
        return []

    def iter_results(self, job_id: str, page: int = 200) -> Iterator[dict[str, Any]]:
        after = -1
        while rows := self.results(job_id, after, page):
            yield from rows
            after = rows[-1]["idx"]

    def summaries(self, job_id: str, limit: int) -> builtins.list[dict[str, Any]]:
        """Index, id, score, label, findings count and status of up to ``limit`` items (the job page)."""
        n = min(limit, self._total(job_id))
        if n <= 0:
            return []
        pipe = self._client.pipeline(transaction=False)
        pipe.lrange(self._k(job_id, "eids"), 0, n - 1)
        pipe.hmget(self._k(job_id, "sums"), [str(i) for i in range(n)])
        eids, sums = self._call(pipe.execute)
        out = []
        for i, (eid, raw) in enumerate(zip(eids, sums)):
            s = json.loads(raw) if raw else {}
            out.append(
                {
                    "idx": i,
                    "item_id": eid if raw else None,
                    "status": s.get("status"),
                    "score": s.get("score"),
                    "label": s.get("label"),
                    "findings": s.get("findings"),
                    "error": s.get("error"),
                    "has": int(bool(s.get("has"))) if raw else None,
                    "reason": s.get("reason"),
                    "eid": eid,
                }
            )
        return out

    def item(self, job_id: str, index: int) -> tuple[Example | None, Mapping[str, Any] | None] | None:
        """The item (None when its stored data cannot be read) and its result; None when there is no such item."""
        pipe = self._client.pipeline(transaction=False)
        pipe.hget(self._k(job_id, "items"), str(index))
        pipe.hget(self._k(job_id, "results"), str(index))
        pipe.hget(self._k(job_id), "total")
        example, result, total = self._call(pipe.execute)
        if example is None and (result is None or not 0 <= index < int(total or 0)):
            return None
        return _stored_example(example or "")[0], (_result_row(index, result) if result is not None else None)

    def clear(self) -> int:
        """Delete every job under this store's prefix (tests, a fresh deployment); returns how many keys."""
        n = 0
        for key in self._client.scan_iter(match=self.prefix.replace("*", r"\*") + "*", count=1000):
            n += self._client.delete(key)
        return n


class RedisQueue:
    """The items of a :class:`RedisJobStore` as one replica's job loop claims them (a
    :class:`~halluscope.server.jobs.base.ItemQueue`): on a lease of ``lease_s`` as consumer ``consumer``.

    An item is claimed with its stream entry; a replica killed mid-item leaves it claimed until the lease runs
    out, then any replica takes it over (a new start: :attr:`Lease.attempt`). Nothing is left to resume at a
    start: the leases do it."""

    too_often = (
        "item {index} was handed out {times} times without a result (each run ended its replica or lost its "
        "lease; the limit is {limit})"
    )

    def __init__(self, store: RedisJobStore, consumer: str, lease_s: float):
        self.store = store
        self.consumer = consumer
        self.lease_s = lease_s

    def resume(self) -> int:
        return 0

    def active_ids(self) -> builtins.list[str]:
        return self.store.active_ids()

    def get(self, job_id: str) -> dict[str, Any] | None:
        return self.store.get(job_id)

    def claim(self, job_id: str, count: int) -> builtins.list[HeldItem]:
        return builtins.list(self.store.claim(job_id, self.consumer, count, self.lease_s))

    def renew(self, job_id: str, items: builtins.list[HeldItem]) -> builtins.list[int]:
        by_entry = {_lease(item).entry_id: item.index for item in items}
        return [by_entry[e] for e in self.store.renew(job_id, self.consumer, builtins.list(by_entry)) if e in by_entry]

    def complete(
        self,
        job_id: str,
        item: HeldItem,
        *,
        report: Report | None = None,
        report_json: str | None = None,
        status: int = 200,
        error: str | None = None,
    ) -> int:
        return self.store.complete(
            job_id, _lease(item), report=report, report_json=report_json, status=status, error=error
        )

    def release(self, job_id: str, items: builtins.list[HeldItem]) -> int:
        return self.store.release(job_id, self.consumer, [_lease(i).entry_id for i in items], self.lease_s)

    def finish(self, job_id: str, status: str, error: str | None = None) -> bool:
        return self.store.finish(job_id, status, error)


def _lease(item: HeldItem) -> Lease:
    if not isinstance(item, Lease):
        raise TypeError(f"not an item claimed from Redis: {item!r}")
    return item


def _result_row(index: int, raw: str) -> dict[str, Any]:
    data = json.loads(raw)
    return {
        "idx": index,
        "item_id": data.get("item_id"),
        "status": data["status"],
        "report": data.get("report"),
        "error": data.get("error"),
        "attempt": data.get("attempt"),
    }


def _decode_job(raw: dict[str, str]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for field in _JOB_FIELDS:
        value = raw.get(field)
        if field in _INT_FIELDS:
            row[field] = int(value or 0)
        elif field in _FLOAT_FIELDS:
            row[field] = float(value) if value not in (None, "") else (0.0 if field == "score_sum" else None)
        else:
            row[field] = value if value != "" or field not in ("error", "name", "dataset") else None
    row["options"] = row["options"] or "{}"
    return _job(cast(Any, row))
