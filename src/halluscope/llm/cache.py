"""The persistent response cache keyed by (model, params, messages), and the text hygiene it relies on.

Two backends with one interface (``get(key) -> Completion | None``, ``put(key, completion)``, ``len()``,
``close()``), chosen by :func:`open_cache` from ``Config.cache_url``:

* :class:`ResponseCache` - one SQLite file (WAL mode): one machine, any number of processes on it;
* :class:`RedisCache` - a Redis server: every process on every machine of a cluster shares one cache
  (``redis://host:6379/0``, ``rediss://`` for TLS, ``unix:///path/redis.sock``).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import ValidationError

from halluscope.llm.base import Completion, GenerateParams, Message
from halluscope.sqlite_file import SqliteTable

if TYPE_CHECKING:
    from halluscope.config import Config

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with every unpaired UTF-16 surrogate replaced by U+FFFD (a valid pair becomes its character).

    A lone surrogate (e.g. ``"\\ud800"`` decoded from a JSON reply) is a valid Python string but cannot be
    encoded as UTF-8, so it would crash SQLite, the HTTP client or a tokenizer later on. Backends apply this
    to every reply and :class:`~halluscope.llm.client.LLM` to every message and reply."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_messages(messages: list[Message]) -> list[Message]:
    """``messages`` with :func:`clean_text` applied to every string value (the same list when nothing changes)."""
    if not any(isinstance(v, str) and _SURROGATE.search(v) for m in messages for v in m.values()):
        return messages
    return [{k: clean_text(v) if isinstance(v, str) else v for k, v in m.items()} for m in messages]


def cache_key(model: str, params: GenerateParams, messages: list[Message]) -> str:
    dumped = params.model_dump(mode="json")
    if dumped.get("top_logprobs") is None:  # added later: keys of requests without it are unchanged
        dumped.pop("top_logprobs", None)
    payload = json.dumps(
        {"model": model, "params": dumped, "messages": messages},
        sort_keys=True,
        ensure_ascii=False,
    )
    # surrogatepass: a key for text with lone surrogates, instead of a UnicodeEncodeError
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


class ResponseCache(SqliteTable):
    """Thread-safe; one connection guarded by a lock (SQLite calls are microseconds next to an LLM's)."""

    table = "responses"

    def __init__(self, path: Path | str):
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        super().__init__(
            str(path),
            "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, model TEXT, "
            "completion TEXT, created REAL DEFAULT (julianday('now')))",
        )

    def get(self, key: str) -> Completion | None:
        with self._lock:
            row = self._conn.execute("SELECT completion FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            return Completion.model_validate_json(row[0])
        except ValidationError:  # written by an incompatible version: a miss, overwritten on put
            return None

    def put(self, key: str, completion: Completion) -> None:
        completion = completion.model_copy(update={"text": clean_text(completion.text)})
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO responses (key, model, completion) VALUES (?, ?, ?)",
                (key, completion.model, completion.model_dump_json()),
            )


class Cache(Protocol):
    """What :class:`~halluscope.llm.client.LLM` needs from a response cache."""

    def get(self, key: str) -> Completion | None: ...

    def put(self, key: str, completion: Completion) -> None: ...

    def close(self) -> None: ...


class CacheBackendError(ValueError):
    """A cache backend that cannot be used (bad URL, server unreachable, client library missing)."""


REDIS_SCHEMES = ("redis", "rediss", "unix")
SQLITE_SCHEMES = ("sqlite",)


def _redact(url: str) -> str:
    """``url`` without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class RedisCache:
    """The response cache in Redis, shared by every process and machine that uses the same URL.

    One Redis string per reply: key ``<prefix><sha256 cache key>``, value the Completion's JSON (the same
    key and value as :class:`ResponseCache`, so both give the same replies). Thread-safe (redis-py's
    connection pool). ``ttl_s`` lets entries expire (default: never; size the server's ``maxmemory`` and
    ``maxmemory-policy`` instead). Keep the server's persistence on (``appendonly yes``) if the cache must
    survive a Redis restart: without it a restart empties the cache, which costs LLM calls, not results.

    The server is pinged on construction, so a wrong URL fails at once with a clear error. After that a
    Redis error (after redis-py's bounded retries) never fails an item: a failed ``get`` is a miss and a
    failed ``put`` is skipped, each counted in ``errors`` and warned about once on stderr.

    Options in the URL's query string, besides redis-py's own: ``prefix`` (default ``halluscope:llm:``)
    and ``ttl`` (seconds)."""

    DEFAULT_PREFIX = "halluscope:llm:"

    def __init__(
        self, url: str, *, prefix: str | None = None, ttl_s: float | None = None, socket_timeout_s: float = 10.0
    ):
        try:
            import redis
            from redis.backoff import ExponentialWithJitterBackoff
            from redis.retry import Retry
        except ImportError as exc:
            raise CacheBackendError("the Redis cache needs the redis client: pip install 'halluscope[redis]'") from exc
        parts = urlsplit(url)
        if parts.scheme not in REDIS_SCHEMES:
            raise CacheBackendError(f"not a Redis URL: {_redact(url)} (use redis://, rediss:// or unix://)")
        query = dict(parse_qsl(parts.query))
        url_prefix = query.pop("prefix", None)
        url_ttl = query.pop("ttl", None)
        self.url = urlunsplit(parts._replace(query=urlencode(query)))
        self.prefix = prefix if prefix is not None else (url_prefix or self.DEFAULT_PREFIX)
        try:
            self.ttl_s = ttl_s if ttl_s is not None else (float(url_ttl) if url_ttl else None)
        except ValueError:
            raise CacheBackendError(f"ttl in the cache URL must be a number of seconds, got {url_ttl!r}") from None
        self.errors = 0
        self._warned = False
        self._redis = redis
        try:
            self._client = redis.Redis.from_url(
                self.url,
                socket_timeout=socket_timeout_s,
                socket_connect_timeout=socket_timeout_s,
                retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), 3),
                retry_on_error=[redis.ConnectionError, redis.TimeoutError],
                health_check_interval=30,
            )
            self._client.ping()
        except (redis.RedisError, ValueError) as exc:
            raise CacheBackendError(
                f"cannot use the Redis cache at {_redact(url)}: {type(exc).__name__}: {exc}"
            ) from exc

    def _failed(self, what: str, exc: Exception) -> None:
        self.errors += 1
        if not self._warned:
            self._warned = True
            print(
                f"warning: Redis cache {what} failed ({type(exc).__name__}: {exc}); treated as a miss, the run "
                "goes on (further errors are counted in RedisCache.errors, not printed)",
                file=sys.stderr,
            )

    def get(self, key: str) -> Completion | None:
        try:
            raw = self._client.get(self.prefix + key)
        except self._redis.RedisError as exc:
            self._failed("read", exc)
            return None
        if raw is None:
            return None
        try:
            return Completion.model_validate_json(raw)
        except ValidationError:  # written by an incompatible version: a miss, overwritten on put
            return None

    def put(self, key: str, completion: Completion) -> None:
        completion = completion.model_copy(update={"text": clean_text(completion.text)})
        try:
            self._client.set(
                self.prefix + key,
                completion.model_dump_json().encode("utf-8"),
                ex=int(self.ttl_s) if self.ttl_s else None,
            )
        except self._redis.RedisError as exc:
            self._failed("write", exc)

    def _pattern(self) -> str:
        """A SCAN pattern for this cache's keys (glob characters in the prefix escaped)."""
        return re.sub(r"([*?\[\]\\])", r"\\\1", self.prefix) + "*"

    def __len__(self) -> int:
        """Entries under this cache's prefix (a SCAN: fine for tests and audits, slow on a huge server)."""
        return sum(1 for _ in self._client.scan_iter(match=self._pattern(), count=1000))

    def clear(self) -> int:
        """Delete every entry under this cache's prefix; returns how many."""
        n = 0
        for key in self._client.scan_iter(match=self._pattern(), count=1000):
            n += self._client.delete(key)
        return n

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"RedisCache({_redact(self.url)!r}, prefix={self.prefix!r})"


def open_cache(config: Config) -> Cache | None:
    """The response cache ``config`` asks for: ``None`` when ``config.cache`` is off; else by
    ``config.cache_url`` - unset: SQLite at ``config.cache_path``; ``sqlite:////abs/path.sqlite`` or
    ``sqlite:///relative.sqlite`` (SQLAlchemy's spelling) or ``sqlite:/abs/path.sqlite``: SQLite there;
    ``redis://``, ``rediss://``, ``unix://``: :class:`RedisCache`."""
    if not config.cache:
        return None
    url = (config.cache_url or "").strip()
    if not url:
        return ResponseCache(config.cache_path)
    scheme = urlsplit(url).scheme.lower()
    if scheme in SQLITE_SCHEMES:
        path = url.split(":", 1)[1]
        if path.startswith("//"):  # SQLAlchemy's spelling: sqlite:///rel.sqlite, sqlite:////abs/path.sqlite
            path = path[2:]
            path = path[1:] if path.startswith("/") else path
        if not path:
            raise CacheBackendError(f"no file in the cache URL {url!r} (e.g. sqlite:////var/cache/halluscope.sqlite)")
        return ResponseCache(path)
    if scheme in REDIS_SCHEMES:
        return RedisCache(url)
    raise CacheBackendError(
        f"unsupported cache URL {_redact(url)!r}: use redis://host:port/db, rediss://..., "
        "unix:///path/redis.sock or sqlite:////abs/path/file.sqlite (or leave it unset for "
        "the SQLite file at cache_path)"
    )
