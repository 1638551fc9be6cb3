"""Scenarios that stop a server mid-job and start another on the same folder: kill -9 then resume, and SIGTERM
(a rolling deploy) then resume."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.loadtest.processes import free_port, start_server, start_stub

# --- scenario: kill -9 mid-job, restart, resume ------------------------------------------------------------


@dataclass
class KillResume:
    items: int
    finished_before_kill: int = 0
    held_at_kill: int = 0
    stub_before_kill: dict[str, Any] = field(default_factory=dict)
    stub_after: dict[str, Any] = field(default_factory=dict)
    job_after: dict[str, Any] = field(default_factory=dict)
    result_indexes: list[int] = field(default_factory=list)
    resume_seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        lost = self.items - len(set(self.result_indexes))
        return {
            "items": self.items,
            "finished_before_kill": self.finished_before_kill,
            "in_flight_at_kill": self.held_at_kill,
            "status_after": self.job_after.get("status"),
            "attempts": self.job_after.get("attempts"),
            "items_lost": lost,
            "items_recorded_twice": len(self.result_indexes) - len(set(self.result_indexes)),
            "llm_requests": self.stub_after.get("received"),
            "distinct_prompts": self.stub_after.get("distinct"),
            "repeated_calls_for_answered_prompts": self.stub_after.get("repeated_answered"),
            "unanswered_requests_sent_again": self.stub_after.get("received", 0) - self.stub_after.get("distinct", 0),
            "resume_seconds": round(self.resume_seconds, 2),
        }


def kill_resume(
    home: Path,
    items: int = 20,
    kill_after: int = 10,
    concurrency: int = 2,
    latency_ms: float = 30.0,
    timeout_s: float = 120.0,
) -> KillResume:
    """A geval job of ``items`` pairs; the stub answers ``kill_after`` requests and holds the next ones; the
    server is killed with SIGKILL once those replies are stored; a new server on the same folder resumes."""
    out = KillResume(items)
    with start_stub(home / "stub", latency_ms=latency_ms, hold_after=kill_after) as stub:
        port = free_port()
        args = ("--job-concurrency", str(concurrency))
        server = start_server(home, *args, stub=stub, port=port)
        try:
            pairs = [
                {
                    "id": f"item-{i}",
                    "source": "The ferry costs 3 million; a grant pays two thirds.",
                    "target": f"The ferry costs {i + 1} million.",
                }
                for i in range(items)
            ]
            job = httpx.post(server.url + "/jobs", json={"method": "geval", "items": pairs}, timeout=30).json()
            job_id = job["id"]
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                info = httpx.get(f"{server.url}/jobs/{job_id}", timeout=10).json()
                stats = httpx.get(stub.url + "/stats", timeout=10).json()
                if info["done"] >= kill_after and stats["held"] >= min(concurrency, items - kill_after):
                    break
                time.sleep(0.05)
            time.sleep(0.3)  # nothing moves now: every answered reply is stored, the next requests are held
            out.finished_before_kill = httpx.get(f"{server.url}/jobs/{job_id}", timeout=10).json()["done"]
            out.stub_before_kill = httpx.get(stub.url + "/stats", timeout=10).json()
            out.held_at_kill = out.stub_before_kill["held"]
            server.kill9()
        finally:
            server.stop()
        httpx.post(stub.url + "/release", timeout=10)  # later requests are answered normally
        started = time.perf_counter()
        with start_server(home, *args, stub=stub, port=port) as server:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                out.job_after = httpx.get(f"{server.url}/jobs/{job_id}", timeout=10).json()
                if out.job_after["status"] in ("done", "failed"):
                    break
                time.sleep(0.05)
            out.resume_seconds = time.perf_counter() - started
            lines = httpx.get(f"{server.url}/jobs/{job_id}/results", timeout=30).text.splitlines()
            out.result_indexes = [json.loads(line)["index"] for line in lines]
        out.stub_after = httpx.get(stub.url + "/stats", timeout=10).json()
    return out


def graceful_restart(
    home: Path, items: int = 24, answered_first: int = 6, concurrency: int = 4, timeout_s: float = 120.0
) -> dict[str, Any]:
    """SIGTERM mid-job (a rolling deploy), with the order of events forced, not timed: the stub answers
    ``answered_first`` requests and holds the next ones; once ``concurrency`` items are in flight the server
    gets SIGTERM; once it logs that it drains, the stub answers the held requests. Those items finish within
    the grace, none starts; a new server resumes the rest. Every prompt should reach the stub exactly once."""
    with start_stub(home / "stub", latency_ms=0, hold_after=answered_first) as stub:
        port = free_port()
        args = ("--job-concurrency", str(concurrency), "--log-level", "info")
        server = start_server(home, *args, stub=stub, port=port)
        try:
            pairs = [
                {"source": "The ferry costs 3 million.", "target": f"The ferry costs {i} million."}
                for i in range(items)
            ]
            job_id = httpx.post(server.url + "/jobs", json={"method": "geval", "items": pairs}, timeout=30).json()["id"]
            in_flight = min(concurrency, items - answered_first)
            _wait_for(
                lambda: httpx.get(stub.url + "/stats", timeout=10).json()["held"] >= in_flight,
                timeout_s,
                f"{in_flight} requests held by the stub",
            )
            started = time.perf_counter()
            server.popen.terminate()  # SIGTERM
            _wait_for(
                lambda: "jobs draining" in server.log.read_text(errors="replace"),
                timeout_s,
                "the server drains its jobs",
            )
            httpx.post(stub.url + "/release?answer=held", timeout=10)  # the items in flight may finish now
            server.popen.wait(timeout_s)
            stop_seconds = time.perf_counter() - started
        finally:
            server.stop()
        with start_server(home, *args, stub=stub, port=port) as again:
            # the stub still holds every new request, so the resumed server has finished nothing yet when it is
            # asked: the count is the one the drain left (read before any release, not raced against it)
            paused = httpx.get(f"{again.url}/jobs/{job_id}", timeout=10).json()
            job = paused
            deadline = time.monotonic() + timeout_s
            while job["status"] != "done" and time.monotonic() < deadline:
                httpx.post(stub.url + "/release?answer=held", timeout=10)  # answer what the resumed job sent
                time.sleep(0.05)
                job = httpx.get(f"{again.url}/jobs/{job_id}", timeout=10).json()
        stats = httpx.get(stub.url + "/stats", timeout=10).json()
    return {
        "items": items,
        "answered_before_sigterm": answered_first,
        "in_flight_at_sigterm": in_flight,
        "done_at_restart": paused["done"],
        "status_after": job["status"],
        "done": job["done"],
        "attempts": job["attempts"],
        "stop_seconds": round(stop_seconds, 2),
        "llm_requests": stats["received"],
        "distinct_prompts": stats["distinct"],
        "repeated_calls_for_answered_prompts": stats["repeated_answered"],
    }


def _wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll for a state (not a guessed delay); fail with ``what`` after a generous ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for: {what}")
