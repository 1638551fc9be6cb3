"""Worker processes for the checks that call no LLM (``gate``, ``rouge``, an ensemble or pipeline of no-LLM parts).

Their work is pure-Python CPU work (sentence splitting, word scans, n-gram counts). On worker threads it no longer
blocks the loop that answers HTTP, but it holds the GIL: beside four large ``gate`` checks, ``/health`` waited up
to 100-600 ms for its turn. Here such a check runs in a separate process, so the server process only sends the
pair and receives the :class:`~halluscope.records.Report` (pickled, the same record the in-thread path makes).

* The processes come from the ``forkserver`` start method (``spawn`` where there is none; never ``fork``: the
  server has threads), with the built-in methods and their libraries preloaded and imported again in each worker
  before it reports ready: the first check pays no import.
* One process per slot (``--cpu-workers``, default ``min(2, CPUs)``); a check takes a free slot, waiting for one
  without blocking its event loop, and holds it until it ends. A check that is cancelled or runs past the time
  limit has its process killed and replaced: the CPU it used is freed, not left running.
* A process that dies (killed, out of memory) fails only the check it was running, with an explicit error
  (:class:`WorkerDied`); its slot gets a new process.
* Each worker builds its own method instance from the method's name and the options the request gave (kept in a
  small LRU), with the server's :class:`~halluscope.config.Config`; the server has already validated both and
  refused models the operator did not allow.

Methods that stay on the threads: those that call an LLM (``uses_llm``), third-party ones (a class registered at
run time may not exist in a fresh process), ``embed`` and any whose options name a neural checker or model
(``verifier=nli:...``, ``gate=encoder:...``): the model would be loaded once per process, and its kernels release
the GIL anyway.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from halluscope.config import Config
from halluscope.methods import InputError, Method
from halluscope.records import Example, Report

KEEP_ON_THREADS = frozenset({"embed"})
"""Built-in no-LLM methods that still run on the worker threads (see the module's docstring)."""

_WORKER_METHODS_KEPT = 32
_log = logging.getLogger("halluscope.server")


def default_cpu_workers() -> int:
    return min(2, os.cpu_count() or 1)


def takes(method: Method, options: dict[str, Any] | None = None) -> bool:
    """Whether ``method``, built with ``options``, runs in the worker processes: it calls no LLM, is built into
    halluscope, is not kept on the threads, and its options name no neural model or checker to load (an encoder
    verifier or gate, an embedding model: each process would load its own copy; a combiner file is fine)."""
    from halluscope.server.allow import model_references

    if (
        getattr(method, "uses_llm", True)
        or method.name in KEEP_ON_THREADS
        or not type(method).__module__.startswith("halluscope.")
    ):
        return False
    return all(key.rsplit(".", 1)[-1].lower() == "combiner" for key, _ in model_references(options or {}))


class WorkerDied(RuntimeError):
    """The process running a check ended before answering (killed, out of memory); it has been replaced."""


class NotInWorker(RuntimeError):
    """A worker process cannot build this method (its class is not the one the name gives there)."""


class RemoteError(Exception):
    """An exception raised in a worker, carried back by kind (``input``, ``options``, ``internal``, ``missing``),
    its original type's name, its message and its traceback's text (the exception itself may not survive
    pickling)."""

    def __init__(self, kind: str, type_name: str, message: str, trace: str = ""):
        super().__init__(kind, type_name, message, trace)
        self.kind, self.type_name, self.message, self.trace = kind, type_name, message, trace

    def __str__(self) -> str:
        return f"{self.type_name}: {self.message}"


# --- in the worker process ----------------------------------------------------------------------------------

_config: Config | None = None
_methods: collections.OrderedDict[tuple[str, str], Method] = collections.OrderedDict()


def _own_tqdm_lock() -> None:
    """Give tqdm (if installed) a lock of this process only. Its default lock holds a multiprocessing semaphore,
    shared with every process forked after it was made: a worker killed (SIGKILL, a check past its time limit)
    while writing a progress bar would leave it held, and every other worker's next bar would wait for ever."""
    try:
        from tqdm import tqdm  # type: ignore[import-untyped, unused-ignore]  # no stubs without types-tqdm
    except ImportError:
        return
    tqdm.set_lock(threading.RLock())


def _init_worker(config: Config, server_alive: Any) -> None:
    global _config
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the server, which stops the workers
    _own_tqdm_lock()
    _config = config
    # the server holds the other end of ``server_alive`` and never writes to it: end of file = the server is gone
    # (killed with SIGKILL, it could not stop its workers; they would otherwise wait for work forever)
    threading.Thread(
        target=_exit_with_server, args=(server_alive,), daemon=True, name="halluscope-server-watch"
    ).start()
    from halluscope.server.warmup import warm_up

    warm_up()  # already imported where the fork server preloaded them; a spawned worker pays it here, once


def _exit_with_server(server_alive: Any) -> None:
    try:
        server_alive.recv_bytes()
    except (EOFError, OSError):
        pass
    os._exit(0)


def _ping() -> int:
    return os.getpid()


def _method(name: str, cls_path: str, options: dict[str, Any]) -> Method:
    from halluscope.methods import get_method, method_class
    from halluscope.server.instances import options_key

    key = options_key(name, options)
    method = _methods.get(key)
    if method is None:
        cls = method_class(name)
        if f"{cls.__module__}:{cls.__qualname__}" != cls_path:
            raise RemoteError(
                "missing",
                "NotInWorker",
                f"method {name!r} is {cls_path} in the server, {cls.__module__}:{cls.__qualname__} in a worker",
            )
        try:
            method = get_method(name, config=_config, **options)
        except (ValueError, TypeError) as exc:  # built in the server: a stage registered there at run time only
            raise RemoteError(
                "missing",
                "NotInWorker",
                f"method {name!r} with these options cannot be built in a worker process ({type(exc).__name__}: {exc})",
            ) from None
        _methods[key] = method
        while len(_methods) > _WORKER_METHODS_KEPT:
            _methods.popitem(last=False)[1].close()
    _methods.move_to_end(key)
    return method


def _run_check(
    name: str, cls_path: str, options: dict[str, Any], example: Example, labelled: bool
) -> tuple[int, Report]:
    """Check one pair in the worker: its pid and the Report, or a :class:`RemoteError`."""
    from pydantic import ValidationError

    from halluscope.sync import run_sync

    try:
        method = _method(name, cls_path, options)
        if labelled:
            report = run_sync(method.acheck_example(example))
        else:
            report = run_sync(method.acheck(example.source, example.target))
    except RemoteError:
        raise
    except InputError as exc:
        raise RemoteError("input", type(exc).__name__, str(exc)) from None
    except (ValueError, TypeError, KeyError, ValidationError) as exc:
        raise RemoteError("options", type(exc).__name__, str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - carried back by name and message: the server logs it
        import traceback

        raise RemoteError("internal", type(exc).__name__, str(exc), traceback.format_exc()) from None
    return os.getpid(), report


# --- in the server ------------------------------------------------------------------------------------------


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" not in methods:
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    from halluscope.methods import list_methods, method_class
    from halluscope.server.warmup import FIRST_USE_MODULES

    own = (method_class(n).__module__ for n in list_methods())
    preload = [
        __name__,
        "halluscope.stages",
        *(m for m in own if m.startswith("halluscope.")),
        *(m for m, _ in FIRST_USE_MODULES),
        "halluscope.server.cpu_preload",
    ]
    ctx.set_forkserver_preload(list(dict.fromkeys(preload)))  # used when the fork server starts (once a process)
    return ctx


class _Slot:
    """One worker process (an executor of one)."""

    def __init__(self, ctx: Any, config: Config, server_alive: Any):
        self.executor = concurrent.futures.ProcessPoolExecutor(
            1, mp_context=ctx, initializer=_init_worker, initargs=(config, server_alive)
        )
        self.pid: int | None = None
        self.warm = self.executor.submit(_ping)
        self.warm.add_done_callback(self._started)

    def _started(self, future: concurrent.futures.Future[int]) -> None:
        if not future.cancelled() and future.exception() is None:
            self.pid = future.result()

    def end(self) -> None:
        """Stop the process now, whatever it runs (SIGKILL: it holds nothing that must be written)."""
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.kill()

    def kill(self) -> None:
        pid = self.pid
        if pid is None:  # not started yet: end it once it is
            self.warm.add_done_callback(lambda f: _kill(self.pid))
        _kill(pid)


def _kill(pid: int | None) -> None:
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class CpuPool:
    """``n`` worker processes; :meth:`check` runs one check in a free one (waiting for a slot)."""

    def __init__(self, n: int, config: Config):
        self.n = max(1, n)
        self.config = config
        self.on_result: Callable[[int], None] | None = None
        """Called with the worker's pid after each check it answered (tests, debugging)."""
        self.on_submit: Callable[[int], None] | None = None
        """Called with the slot's index once a check has been sent to its process (tests, debugging)."""
        self.restarts = 0
        self._ctx: Any = None
        self._alive_reader: Any = None
        self._alive_writer: Any = None
        self._slots: list[_Slot] = []
        self._free: list[int] = []
        self._waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[int]]] = collections.deque()
        self._lock = threading.Lock()
        self._missing: set[str] = set()  # method classes a worker could not build: on the threads from then on

    @property
    def started(self) -> bool:
        return bool(self._slots)

    def start(self, wait_s: float = 120.0) -> None:
        """Start the processes and wait (at most ``wait_s``) until each has imported what checks need."""
        with self._lock:
            if self._slots:
                return
            self._ctx = _context()
            # the workers read from this pipe: when the server process ends, however it ends, they end
            self._alive_reader, self._alive_writer = self._ctx.Pipe(duplex=False)
            self._slots = [_Slot(self._ctx, self.config, self._alive_reader) for _ in range(self.n)]
            self._free = list(range(self.n))
        done, pending = concurrent.futures.wait([s.warm for s in self._slots], timeout=wait_s)
        for future in done:
            if future.exception() is not None:
                raise RuntimeError(f"a check worker process failed to start: {future.exception()}")
        if pending:
            _log.warning(
                "%d of %d check worker processes not ready after %.0f s; checks wait for them",
                len(pending),
                self.n,
                wait_s,
            )

    def pids(self) -> list[int | None]:
        return [s.pid for s in self._slots]

    def stop(self, grace_s: float = 2.0) -> None:
        """End the processes: an idle one exits at once; one still running a check after ``grace_s`` is killed."""
        with self._lock:
            slots, self._slots, self._free = self._slots, [], []
            waiters, self._waiters = list(self._waiters), collections.deque()
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(_fail, future, RuntimeError("the check workers stopped"))
            except RuntimeError:  # that loop is closed
                pass
        closing = []
        for slot in slots:
            # one shutdown call, which waits until the process has exited: a first one with wait=False would make
            # the executor forget the thread that joins it, and the process would be left to end halfway through
            # its exit (the pipe closed below ends it), its semaphores unlinked but not unregistered
            if grace_s > 0:
                closing.append(
                    threading.Thread(
                        target=slot.executor.shutdown,
                        kwargs={"cancel_futures": True},
                        daemon=True,
                        name="halluscope-cpu-stop",
                    )
                )
                closing[-1].start()
        for thread in closing:
            thread.join(grace_s)
        for slot, thread in itertools.zip_longest(slots, closing):
            if thread is None:
                slot.end()
            elif thread.is_alive():  # still running a check: its shutdown call ends once the process is killed
                slot.kill()
        for end in (self._alive_reader, self._alive_writer):
            if end is not None:
                end.close()
        self._alive_reader = self._alive_writer = None

    def takes(self, method: Method, options: dict[str, Any]) -> bool:
        cls = type(method)
        return self.started and takes(method, options) and f"{cls.__module__}:{cls.__qualname__}" not in self._missing

    # --- slots ---

    async def _acquire(self) -> int:
        with self._lock:
            if not self._slots:
                raise RuntimeError("the check workers are not running")
            if self._free:
                return self._free.pop()
            future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            self._waiters.append((asyncio.get_running_loop(), future))
        try:
            return await future  # a waiter cancelled before it was given a slot hands it on (_give)
        except asyncio.CancelledError:  # cancelled just after it was given one: hand that on
            if future.done() and not future.cancelled() and future.exception() is None:
                self._release(future.result())
            raise

    def _release(self, i: int) -> None:
        with self._lock:
            if i >= len(self._slots):  # stopped meanwhile
                return
            while self._waiters:
                loop, future = self._waiters.popleft()
                try:
                    loop.call_soon_threadsafe(self._give, future, i)
                    return
                except RuntimeError:  # that loop is closed: the next waiter
                    continue
            self._free.append(i)

    def _give(self, future: asyncio.Future[int], i: int) -> None:
        if future.done():  # cancelled while waiting: the slot goes to the next waiter
            self._release(i)
        else:
            future.set_result(i)

    def _replace(self, i: int, why: str) -> None:
        """A new process for slot ``i``; the old one is killed (it may still be running a check)."""
        with self._lock:
            if i >= len(self._slots):
                return
            old = self._slots[i]
            self._slots[i] = _Slot(self._ctx, self.config, self._alive_reader)
            self.restarts += 1
        old.end()
        _log.warning("check worker process %s replaced: %s", old.pid, why)

    # --- checks ---

    def _submit(self, i: int, *args: Any) -> concurrent.futures.Future[tuple[int, Report]]:
        """Send a check to slot ``i``'s process; a process found dead while idle is replaced first (once)."""
        for attempt in (1, 2):
            with self._lock:
                if i >= len(self._slots):
                    raise RuntimeError("the check workers stopped")
                slot = self._slots[i]
            try:
                return slot.executor.submit(_run_check, *args)
            except BrokenProcessPool:
                if attempt == 2:
                    raise
                self._replace(i, "it had ended while idle")
        raise AssertionError("unreachable")

    async def check(
        self, method: Method, recipe: tuple[str, dict[str, Any]], example: Example, labelled: bool
    ) -> Report:
        """Check ``example`` with ``method`` (built in the worker from ``recipe``: its name and options as given)
        in a worker process. Raises what the in-thread path raises for bad input (:class:`InputError`),
        :class:`RemoteError` for the rest, :class:`WorkerDied` when the process died, :class:`NotInWorker` when
        a worker cannot build the method (the caller runs it on a thread)."""
        cls = type(method)
        cls_path = f"{cls.__module__}:{cls.__qualname__}"
        name, options = recipe
        i = await self._acquire()
        try:
            try:
                future = self._submit(i, name, cls_path, options, example, labelled)
                if self.on_submit is not None:
                    self.on_submit(i)
                pid, report = await asyncio.wrap_future(future)
            except asyncio.CancelledError:  # cancelled or past the time limit: free the CPU it is using
                self._replace(i, "its check was cancelled or ran past the time limit")
                raise
            except BrokenProcessPool:
                self._replace(i, "it ended while running a check")
                raise WorkerDied(
                    "the worker process running this check ended before answering (killed or out of "
                    "memory); it has been replaced"
                ) from None
            except RemoteError as exc:
                if exc.kind == "input":
                    raise InputError(exc.message) from None
                if exc.kind == "missing":
                    self._missing.add(cls_path)
                    raise NotInWorker(str(exc)) from None
                if exc.kind == "internal":
                    _log.error(
                        "a check failed in worker process %s:\n%s",
                        self._slots[i].pid if i < len(self._slots) else "?",
                        exc.trace,
                    )
                raise
        finally:
            self._release(i)
        if self.on_result is not None:
            self.on_result(pid)
        return report


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
