"""A check worker process killed while it holds tqdm's lock (writing a progress bar) does not stall the other
workers' bars: the worker initialiser (``cpu_pool._init_worker``) gives tqdm a lock of the worker's own.

Without it, tqdm's default lock is a multiprocessing semaphore shared with every process forked after it was made
(as the check workers are, from one parent): the control run shows the next worker then waits on it for ever.
Runs in a fresh interpreter (it forks, and sets tqdm's class-wide lock); ordered by a pipe, not by sleeps.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("tqdm", reason="tqdm not installed (it comes with the embeddings extra)")

if not hasattr(os, "fork"):
    pytest.skip("needs os.fork", allow_module_level=True)

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import multiprocessing, os, signal, sys
    from tqdm import tqdm
    from halluscope.config import Config
    from halluscope.server.cpu_pool import _init_worker

    initialised = sys.argv[1] == "initialised"
    tqdm.get_lock()  # the parent made a bar before forking its workers: the shared semaphore exists
    server_alive, server = multiprocessing.Pipe(duplex=False)  # kept open: the workers' server stays alive

    def worker() -> "object":
        if initialised:  # as the pool starts each worker
            _init_worker(Config(cache=False), server_alive)
        return tqdm.get_lock()

    ready_r, ready_w = os.pipe()
    first = os.fork()
    if first == 0:  # a worker that holds the lock when it is killed
        worker().acquire()
        os.write(ready_w, b"1")
        signal.pause()
        os._exit(0)
    assert os.read(ready_r, 1) == b"1"
    os.kill(first, signal.SIGKILL)
    os.waitpid(first, 0)

    second = os.fork()
    if second == 0:  # the next worker writes a bar: can it take the lock?
        lock = worker()
        locks = getattr(lock, "locks", [lock])  # tqdm's default lock: the semaphore, then a thread lock
        got = all(lk.acquire(timeout=5) for lk in locks)
        os._exit(0 if got else 3)
    _, status = os.waitpid(second, 0)
    print("took the lock" if os.waitstatus_to_exitcode(status) == 0 else "waited on a dead worker")
    """
)


def _run(mode: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_a_killed_worker_holding_tqdms_lock_does_not_stall_the_next() -> None:
    assert _run("shared") == "waited on a dead worker"  # the hazard, with tqdm's default lock
    assert _run("initialised") == "took the lock"
