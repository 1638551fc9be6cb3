"""Distributed scoring on Ray: ``halluscope bench --engine ray`` and a Python entry point for Ray Datasets.

Work is spread with Ray Data: ``map_batches`` over a fixed pool of actors. Each actor builds, once, the same
method as the driver (class, options, config, prompt overrides) with its own LLM client and response cache,
runs one asyncio loop, and keeps at most ``actor_concurrency`` items in flight; total concurrency is
``actors * actor_concurrency``. Nothing is scheduled by hand: Ray places the actors, feeds them batches,
restarts what dies and streams the results back.

Use it from ``run_bench`` (``engine=RayEngine(...)``: same identity, resume and ``items.jsonl`` as the local
engine; the driver is the only writer of ``items.jsonl``), or directly::

    from halluscope.bench.ray_engine import RayEngine, check_examples
    reports = check_examples(examples, "geval", config=Config(base_url=..., cache_url="redis://..."))
    for example_id, report in RayEngine(actors=8).iter_reports(method, ray.data.read_json("items.jsonl")):
        ...
    ds = RayEngine(actors=8).map_reports(method, ray_dataset)   # lazy: columns example_id, report (JSON)

Same items + same cache -> same reports as a local run: the actors run the very same ``score_example`` and
the cache key does not depend on the engine. Share the cache between machines with
``Config.cache_url = "redis://..."``; an SQLite cache is per machine (a warning says so on a multi-node
cluster). Ray is imported only here, only when used: ``import halluscope`` never imports it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
import os
import re
import sys
import threading
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from halluscope.config import Config
from halluscope.records import Example, Report

if TYPE_CHECKING:
    from halluscope.llm import LLM
    from halluscope.methods.base import Method

ID_COLUMN = "example_id"
REPORT_COLUMN = "report"
EXAMPLE_JSON_COLUMN = "example"  # one Example as JSON text: how iterables of Examples travel
MAX_BLOCKS = 10_000  # an iterable becomes at most this many blocks (finer means more Ray tasks, not more speed)

# On Linux Ray gives a local instance the machine's outward IP; with this set to 0 it uses 127.0.0.1 (the
# setting is Ray's switch for single-machine clusters on macOS/Windows, where loopback is the default).
LOOPBACK_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

LLMFactory = Callable[[Config], "LLM"]


class RayEngineError(RuntimeError):
    """Ray is missing, or a worker cannot build the same method as the driver."""


def require_ray():
    """The ``ray`` module, or a clear error naming the extra to install."""
    try:
        import ray
        import ray.data  # noqa: F401  (Ray Data is a separate extra of ray)
    except ImportError as exc:
        raise RayEngineError(
            f"the Ray engine needs Ray Data: pip install 'halluscope[ray]' (ray[data]>=2.9); import failed: {exc}"
        ) from exc
    return ray


@dataclass(frozen=True)
class MethodSpec:
    """Everything a worker needs to build the same method as the driver; pickled to every actor.

    ``expect`` holds what the driver's instance reports (name, options, prompt version, model); a worker
    whose instance differs (e.g. a prompt override folder missing on that node, another model) refuses to
    start instead of mixing different runs into one ``items.jsonl``."""

    method_cls: type
    options: dict[str, Any]
    config: Config
    llm_factory: LLMFactory | None = None
    expect: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, method: Method, llm_factory: LLMFactory | None = None) -> MethodSpec:
        return cls(
            method_cls=type(method),
            options=method.options(),
            config=method.config,
            llm_factory=llm_factory,
            expect=_fingerprint(method),
        )

    def build(self, max_concurrency: int | None = None) -> Method:
        config = self.config
        if max_concurrency is not None:
            config = config.with_overrides(max_concurrency=max_concurrency)
        llm = self.llm_factory(config) if self.llm_factory is not None else None
        method = self.method_cls(llm=llm, config=config, **self.options)
        got = _fingerprint(method)
        diff = {k: (v, got.get(k)) for k, v in self.expect.items() if json.dumps(got.get(k)) != json.dumps(v)}
        if diff:
            detail = "; ".join(f"{k}: driver {a!r}, worker {b!r}" for k, (a, b) in diff.items())
            hint = (
                " (a method built with an explicit LLM needs llm_factory= so workers can build the same one)"
                if "model" in diff and self.llm_factory is None
                else ""
            )
            raise RayEngineError(f"a Ray worker built a different method than the driver: {detail}{hint}")
        return method


def _fingerprint(method: Method) -> dict[str, Any]:
    return {
        "method": method.name,
        "options": method.options(),
        "prompt_version": method.prompt_version,
        "model": method.model_name,
    }


def example_from_row(row: dict[str, Any]) -> Example:
    """An Example from a dataset row: either an ``example`` column holding the Example as JSON, or columns
    named like Example's fields (``id``, ``source``, ``target``, optional labels); other columns go to
    ``meta``."""
    if EXAMPLE_JSON_COLUMN in row and isinstance(row[EXAMPLE_JSON_COLUMN], (str, bytes)):
        return Example.model_validate_json(row[EXAMPLE_JSON_COLUMN])
    known = set(Example.model_fields)
    data = {k: _plain(v) for k, v in row.items() if k in known and v is not None}
    extra = {k: _plain(v) for k, v in row.items() if k not in known}
    if extra:
        data["meta"] = {**(data.get("meta") or {}), **extra}
    if "id" in data:
        data["id"] = str(data["id"])
    return Example.model_validate(data)


def _plain(value: Any) -> Any:
    """numpy scalars/arrays (from pandas/numpy-backed datasets) as plain Python values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class ScoringActor:
    """One Ray Data actor: builds the method once, then scores each batch on its own event loop.

    The loop runs in a thread of its own for the actor's lifetime, so the LLM client's connection pools and
    semaphores live on one loop across batches; a semaphore shared by all batches keeps at most
    ``actor_concurrency`` items in flight even when Ray runs several batches on this actor at once."""

    def __init__(self, spec: MethodSpec, actor_concurrency: int, skip_ids: frozenset[str] = frozenset()):
        self.method = spec.build(max_concurrency=actor_concurrency)
        self.concurrency = actor_concurrency
        self.skip_ids = skip_ids
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="halluscope-actor-loop", daemon=True)
        self._thread.start()
        self._sem: asyncio.Semaphore | None = None

    async def _score(self, examples: list[Example]) -> list[Report]:
        from halluscope.bench.engines import score_example

        if self._sem is None:
            self._sem = asyncio.Semaphore(self.concurrency)
        sem = self._sem

        async def one(ex: Example) -> Report:
            async with sem:
                return await score_example(self.method, ex)

        return list(await asyncio.gather(*(one(ex) for ex in examples)))

    def __call__(self, batch):
        import pyarrow as pa

        examples = [example_from_row(row) for row in batch.to_pylist()]
        examples = [ex for ex in examples if ex.id not in self.skip_ids]
        reports = asyncio.run_coroutine_threadsafe(self._score(examples), self._loop).result() if examples else []
        return pa.table(
            {
                ID_COLUMN: pa.array([ex.id for ex in examples], pa.string()),
                REPORT_COLUMN: pa.array([r.model_dump_json() for r in reports], pa.string()),
            }
        )


class RayEngine:
    """The Ray engine for :func:`~halluscope.bench.runner.run_bench` and for direct use.

    ``address``: ``None`` starts a local Ray instance (unless one is already initialized in this process),
    ``"auto"`` joins the cluster on this machine (``ray start --head``), ``"ray://head:10001"`` uses Ray
    Client. ``actors``: size of the actor pool; ``actor_concurrency``: items (and LLM requests) in flight per
    actor (default: the run's total concurrency split over the actors); ``batch_size``: items per actor call
    (default ``actor_concurrency``); ``cpus_per_actor``: CPUs Ray reserves per actor (LLM-bound work needs
    little: lower it to pack more actors on a node); ``llm_factory``: how a worker builds its LLM from the
    Config (default ``get_llm``; needed for a method built on an explicit LLM, e.g. a scripted fake);
    ``init_kwargs``: extra ``ray.init`` arguments (e.g. ``runtime_env``)."""

    name = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        actors: int = 2,
        actor_concurrency: int | None = None,
        batch_size: int | None = None,
        cpus_per_actor: float = 1.0,
        llm_factory: LLMFactory | None = None,
        init_kwargs: dict[str, Any] | None = None,
        ray_progress: bool = False,
    ):
        if actors < 1:
            raise ValueError("actors must be >= 1")
        if actor_concurrency is not None and actor_concurrency < 1:
            raise ValueError("actor_concurrency must be >= 1")
        if batch_size is not None and batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if cpus_per_actor < 0:
            raise ValueError("cpus_per_actor must be >= 0")
        self.address = address
        self.actors = actors
        self.actor_concurrency = actor_concurrency
        self.batch_size = batch_size
        self.cpus_per_actor = cpus_per_actor
        self.llm_factory = llm_factory
        self.init_kwargs = dict(init_kwargs or {})
        self.ray_progress = ray_progress
        self._started_ray = False

    # --- Ray session -----------------------------------------------------------------------------------

    def connect(self) -> Any:
        """Initialize Ray if this process has not (returns the ``ray`` module). A local instance started
        here binds to 127.0.0.1 only: nothing outside this machine needs to reach it."""
        local = self.address is None and not os.environ.get("RAY_ADDRESS")
        if local and "ray" not in sys.modules:
            os.environ.setdefault(LOOPBACK_ONLY_ENV, "0")  # read once, when ray is imported
        ray = require_ray()
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"address": self.address, "include_dashboard": False}
            kwargs.update(self.init_kwargs)
            ray.init(**kwargs)
            self._started_ray = True
        ctx = ray.data.DataContext.get_current()
        if hasattr(ctx, "enable_progress_bars"):
            ctx.enable_progress_bars = self.ray_progress  # the runner shows its own progress bar
        if not self.ray_progress:
            logging.getLogger("ray.data").setLevel(logging.WARNING)
        return ray

    def close(self) -> None:
        """Shut Ray down if this engine started it."""
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False

    def __enter__(self) -> RayEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def per_actor(self, total_concurrency: int | None) -> int:
        """Items in flight per actor: ``actor_concurrency``, else the total split evenly over the actors."""
        if self.actor_concurrency is not None:
            return self.actor_concurrency
        return max(1, math.ceil((total_concurrency or 8) / self.actors))

    # --- scoring ----------------------------------------------------------------------------------------

    def map_reports(
        self, method: Method, data: Any, *, total_concurrency: int | None = None, skip_ids: Iterable[str] = ()
    ):
        """A lazy Ray Dataset with columns ``example_id`` and ``report`` (the Report as JSON), one row per
        input item; ``data`` is a Ray Dataset (rows with Example fields, or an ``example`` JSON column) or
        an iterable of Examples. Write it anywhere Ray Data writes (``.write_parquet(...)``) or iterate."""
        ray = self.connect()
        per_actor = self.per_actor(total_concurrency or method.config.max_concurrency)
        batch_size = self.batch_size or per_actor
        skip = frozenset(skip_ids)
        ds = self._dataset(ray, data, batch_size, skip)
        self._warn_if_cache_is_per_node(ray, method.config)
        spec = MethodSpec.of(method, self.llm_factory)
        # a Ray Dataset's finished items are dropped in the actors: no extra stage that would need a CPU slot
        actor_skip = skip if _is_ray_dataset(data) else frozenset()
        return ds.map_batches(
            ScoringActor,
            fn_constructor_args=(spec, per_actor, actor_skip),
            batch_size=batch_size,
            batch_format="pyarrow",
            num_cpus=self.cpus_per_actor,
            **_pool_kwargs(ray, self.actors, calls_per_actor=2),
        )

    def iter_reports(
        self, method: Method, data: Any, *, total_concurrency: int | None = None, skip_ids: Iterable[str] = ()
    ) -> Iterator[tuple[str, Report]]:
        """``(example id, Report)`` for every item, streamed as the actors finish them (in any order)."""
        ds = self.map_reports(method, data, total_concurrency=total_concurrency, skip_ids=skip_ids)
        try:
            for row in ds.iter_rows():
                yield str(row[ID_COLUMN]), Report.model_validate_json(row[REPORT_COLUMN])
        except Exception as exc:  # an actor that refused to start: its reason, not Ray's wrapper around it
            found = _REFUSAL.search(str(exc))
            if found:
                raise RayEngineError(found.group(1).strip()) from exc
            raise

    async def results(
        self, method: Method, pending: Sequence[Example], concurrency: int
    ) -> AsyncGenerator[tuple[str, Report], None]:
        """The :class:`~halluscope.bench.engines.Engine` protocol: the Ray stream, without blocking the loop."""
        self.connect()  # here, not in the worker thread below: ray.init wants the main thread
        done = object()
        iterator = self.iter_reports(method, list(pending), total_concurrency=concurrency)
        try:
            while True:
                item = await asyncio.to_thread(next, iterator, done)
                if item is done:
                    return
                yield item  # type: ignore[misc]
        finally:
            try:
                iterator.close()  # stops the Ray Data execution (and its actors)
            except ValueError:  # still running in the worker thread (we were cancelled): it ends with Ray
                pass

    def _dataset(self, ray, data: Any, batch_size: int, skip_ids: frozenset[str]):
        if isinstance(data, ray.data.Dataset):
            return data  # skip_ids are applied in the actors
        rows, seen = [], set()
        for ex in data:
            if not isinstance(ex, Example):
                ex = Example.model_validate(ex)
            if ex.id in seen:
                raise ValueError(f"duplicate example id {ex.id!r}")
            seen.add(ex.id)
            if ex.id not in skip_ids:
                rows.append({"id": ex.id, EXAMPLE_JSON_COLUMN: ex.model_dump_json()})
        blocks = max(1, min(MAX_BLOCKS, math.ceil(len(rows) / batch_size)))
        params = inspect.signature(ray.data.from_items).parameters
        key = "override_num_blocks" if "override_num_blocks" in params else "parallelism"  # Ray < 2.10: parallelism
        return ray.data.from_items(rows, **{key: blocks})

    def _warn_if_cache_is_per_node(self, ray, config: Config) -> None:
        if not config.cache or (config.cache_url or "").startswith(("redis", "unix")):
            return
        try:
            nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        except Exception:  # an informational check must never stop a run
            return
        if nodes > 1:
            print(
                f"warning: the Ray cluster has {nodes} nodes but the response cache is an SQLite file per node; "
                "share one cache with HALLUSCOPE_CACHE_URL=redis://host:6379/0 (see docs/scaling.md)",
                file=sys.stderr,
            )


_REFUSAL = re.compile(r"RayEngineError: (.+)")


def _pool_kwargs(ray, actors: int, calls_per_actor: int) -> dict[str, Any]:
    """A fixed pool of ``actors`` actors, each running up to ``calls_per_actor`` batches at once (so an actor
    never idles at a batch boundary), spelled for the installed Ray version."""
    strategy = ray.data.ActorPoolStrategy
    params = inspect.signature(strategy.__init__).parameters
    if "max_concurrent_calls_per_actor" in params:
        kwargs: dict[str, Any] = {"max_concurrent_calls_per_actor": calls_per_actor}
        if "enable_true_multi_threading" in params:
            kwargs["enable_true_multi_threading"] = True
        return {"compute": strategy(size=actors, **kwargs)}
    return {"compute": strategy(size=actors), "max_concurrency": calls_per_actor}  # older Ray: a remote arg


def check_examples(
    data: Any,
    method: str | Method = "geval",
    *,
    config: Config | None = None,
    llm_factory: LLMFactory | None = None,
    address: str | None = None,
    actors: int = 2,
    actor_concurrency: int | None = None,
    cpus_per_actor: float = 1.0,
    skip_ids: Iterable[str] = (),
    **options: Any,
) -> dict[str, Report]:
    """Score ``data`` (an iterable of Examples or a Ray Dataset) on Ray; returns ``{example id: Report}``,
    in input order for an iterable. ``method`` is a name (built with ``config`` and ``options``) or a
    Method instance; items whose id is in ``skip_ids`` are left out (e.g. those already done). Ray stays
    initialized afterwards (``ray.shutdown()`` when done), so later calls skip its start-up."""
    from halluscope.methods import get_method

    if isinstance(method, str):
        config = config or Config()
        llm = llm_factory(config) if llm_factory is not None else None
        method = get_method(method, llm=llm, config=config, **options)
    elif options or config is not None:
        raise ValueError("pass options and config when naming the method, not with a Method instance")
    engine = RayEngine(
        address=address,
        actors=actors,
        actor_concurrency=actor_concurrency,
        cpus_per_actor=cpus_per_actor,
        llm_factory=llm_factory,
    )
    order: list[str] | None = None
    skip = set(skip_ids)
    if not _is_ray_dataset(data):
        data = [ex if isinstance(ex, Example) else Example.model_validate(ex) for ex in data]
        order = [ex.id for ex in data if ex.id not in skip]
    reports = dict(engine.iter_reports(method, data, skip_ids=skip))
    return {i: reports[i] for i in order} if order is not None else reports


def _is_ray_dataset(data: Any) -> bool:
    ray_data = sys.modules.get("ray.data")  # a Ray Dataset can only exist once ray.data was imported
    return ray_data is not None and isinstance(data, ray_data.Dataset)
