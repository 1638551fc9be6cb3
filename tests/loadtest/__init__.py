"""Load and fault scenarios against real server processes on 127.0.0.1 (shared by the tests, bounded, and
``benchmarks/service_load.py``, heavy). Linux only: memory and open files are read from ``/proc``.

Every scenario starts its own processes (a stub OpenAI-compatible endpoint, ``python -m halluscope.server``)
with the LLM cache and the jobs database in a folder it is given, and stops them by process id.
"""

from tests.loadtest.processes import (
    HOST,
    Proc,
    free_port,
    open_fds,
    peak_rss_mb,
    rss_mb,
    start_server,
    start_stub,
)
from tests.loadtest.restarts import KillResume, graceful_restart, kill_resume
from tests.loadtest.traffic import (
    concurrent_checks,
    distinct_options,
    health_under_hostile_replies,
    huge_body,
    probe_judge_options,
    send_declared_body,
    slow_senders,
)

__all__ = [
    "HOST",
    "KillResume",
    "Proc",
    "concurrent_checks",
    "distinct_options",
    "free_port",
    "graceful_restart",
    "health_under_hostile_replies",
    "huge_body",
    "kill_resume",
    "open_fds",
    "peak_rss_mb",
    "probe_judge_options",
    "rss_mb",
    "send_declared_body",
    "slow_senders",
    "start_server",
    "start_stub",
]
