"""Checks that call no LLM run in worker processes (``halluscope/server/cpu_pool.py``): proved by the pid that
answered, with the same Reports as the in-thread path; a worker that dies fails only its check, explicitly, and is
replaced; a check past the time limit has its process killed; ``--cpu-workers`` reaches the settings."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")
pytest.importorskip("prometheus_client", reason="server extra not installed: pip install 'halluscope[server]'")

from fastapi.testclient import TestClient

from halluscope.config import Config
from halluscope.llm import LLM, FakeModel
from halluscope.methods import method_class
from halluscope.server import ServerSettings, create_app
from halluscope.server.cpu_pool import takes

TOKEN = "t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PAIRS = [
    (
        "The council met on Monday. It approved the budget of $3 million for the new ferry.",
        "The council met on Tuesday and approved a budget of $3 million.",
    ),
    (
        "Ada Lovelace wrote the first published algorithm. She worked with Charles Babbage on the Analytical Engine.",
        "Ada Lovelace worked with Charles Babbage. She never wrote an algorithm.",
    ),
    (
        "The harbour bridge opened in 1932 and carries eight lanes of traffic.",
        "The bridge opened in 1932. It carries trains only.",
    ),
]
CASES = [("gate", {}), ("rouge", {}), ("rouge", {"variant": "rougeL"}), ("gate", {"threshold": 0.3})]


def make_app(tmp_path, **settings):
    settings.setdefault("token", TOKEN)
    settings.setdefault("jobs_db", tmp_path / "jobs.sqlite")
    return create_app(
        Config(cache=False), ServerSettings(**settings), llm=LLM(FakeModel(default='{"reason": "ok", "score": 5}'))
    )


def comparable(report: dict) -> dict:
    return {k: v for k, v in report.items() if k != "elapsed_s"}


def check_all(client: TestClient, cases=CASES) -> list[dict]:
    out = []
    for method, options in cases:
        for source, target in PAIRS:
            r = client.post(
                "/check", headers=AUTH, json={"source": source, "target": target, "method": method, "options": options}
            )
            assert r.status_code == 200, r.text
            out.append(comparable(r.json()))
    return out


def test_no_llm_checks_run_in_another_process_with_the_same_reports_as_on_threads(tmp_path):
    from halluscope.methods import get_method

    assert options_valid()
    assert takes(get_method("gate")) and takes(get_method("rouge"))
    assert not takes(get_method("geval", llm=LLM(FakeModel(default="{}")), config=Config(cache=False)))
    with TestClient(make_app(tmp_path / "threads", cpu_workers=0)) as c:
        assert c.app.state.service.cpu is None
        on_threads = check_all(c)
    pids: list[int] = []
    with TestClient(make_app(tmp_path / "processes", cpu_workers=2)) as c:
        service = c.app.state.service
        workers = set(service.cpu.pids())
        assert len(workers) == 2 and os.getpid() not in workers and None not in workers
        service.cpu.on_result = pids.append
        in_processes = check_all(c)
        geval = c.post("/check", headers=AUTH, json={"source": PAIRS[0][0], "target": PAIRS[0][1], "method": "geval"})
        assert geval.status_code == 200
    assert len(pids) == len(CASES) * len(PAIRS)  # every gate and rouge check, and not the geval one
    assert set(pids) <= workers
    assert in_processes == on_threads
    assert any(r["score"] is not None and r["score"] < 1 for r in in_processes)  # not trivially equal


def test_methods_that_call_an_llm_or_come_from_elsewhere_stay_on_the_threads():
    from halluscope.methods import Method
    from halluscope.methods.rouge import Rouge

    class Outside(Rouge):  # a no-LLM method defined outside halluscope: a fresh process may not know it
        name = "outside"

    class Calls(Rouge):
        uses_llm = True

    assert takes(Rouge()) and not takes(Outside()) and not takes(Calls())
    assert takes(Rouge(), {"variant": "rouge1", "combiner": "fitted.json"})
    assert not takes(Rouge(), {"verifier": "nli:some/checkpoint"})  # a neural checker: loaded once, on the threads
    assert not takes(Rouge(), {"gate.checkpoint": "/models/gate"}) and not takes(Rouge(), {"embedding_model": "m"})
    embed = Method.__new__(method_class("embed"))
    assert not takes(embed)


def options_valid() -> bool:
    from halluscope.methods import get_method

    return all(get_method(m, **o).name == m for m, o in CASES)


def test_batches_and_job_items_run_in_the_processes_with_the_same_results(tmp_path):
    items = [{"id": f"p{i}", "source": s, "target": t} for i, (s, t) in enumerate(PAIRS)]

    def run(client: TestClient) -> tuple[dict, dict]:
        r = client.post("/check/batch", headers=AUTH, json={"method": "gate", "items": items})
        assert r.status_code == 200
        batch = {line["id"]: comparable(line["report"]) for line in map(json.loads, r.text.splitlines())}
        job = client.post("/jobs", headers=AUTH, json={"method": "rouge", "items": items}).json()["id"]
        deadline = time.monotonic() + 60
        while client.get(f"/jobs/{job}", headers=AUTH).json()["status"] != "done":
            assert time.monotonic() < deadline, "the job did not finish"
            time.sleep(0.05)
        lines = client.get(f"/jobs/{job}/results", headers=AUTH).text.splitlines()
        results = {line["id"]: comparable(line["report"]) for line in map(json.loads, lines)}
        return batch, results

    with TestClient(make_app(tmp_path / "threads", cpu_workers=0)) as c:
        on_threads = run(c)
    pids: list[int] = []
    with TestClient(make_app(tmp_path / "processes", cpu_workers=1)) as c:
        c.app.state.service.cpu.on_result = pids.append
        in_processes = run(c)
        worker = c.app.state.service.cpu.pids()[0]
    assert pids == [worker] * (2 * len(PAIRS)) and worker != os.getpid()
    assert in_processes == on_threads and len(on_threads[0]) == len(on_threads[1]) == len(PAIRS)


def test_bad_input_is_still_422_from_a_worker(tmp_path):
    with TestClient(make_app(tmp_path, cpu_workers=1)) as c:
        r = c.post("/check", headers=AUTH, json={"source": "\u200b\u2060", "target": "x y", "method": "gate"})
        assert r.status_code == 422, r.text


def _check_in_thread(client: TestClient, out: dict, method: str = "gate") -> threading.Thread:
    def post() -> None:
        out["response"] = client.post(
            "/check", headers=AUTH, json={"source": PAIRS[0][0], "target": PAIRS[0][1], "method": method}
        )

    thread = threading.Thread(target=post)
    thread.start()
    return thread


def test_a_killed_worker_fails_its_check_explicitly_and_the_next_check_succeeds(tmp_path):
    """The worker is stopped (SIGSTOP), so the check sent to it cannot finish; once the pool reports the check sent,
    the worker is killed: that check gets a 500 naming the cause, the slot gets a new process, the next check
    succeeds there."""
    with TestClient(make_app(tmp_path, cpu_workers=1), raise_server_exceptions=False) as c:
        pool = c.app.state.service.cpu
        first = pool.pids()[0]
        sent = threading.Event()
        pool.on_submit = lambda _slot: sent.set()
        os.kill(first, signal.SIGSTOP)
        out: dict = {}
        thread = _check_in_thread(c, out)
        try:
            assert sent.wait(60), "the check was never sent to the worker"
        finally:
            os.kill(first, signal.SIGKILL)
        thread.join(60)
        assert not thread.is_alive()
        r = out["response"]
        assert r.status_code == 500 and "worker process" in r.json()["detail"], r.text
        assert pool.restarts == 1
        pids: list[int] = []
        pool.on_result = pids.append
        again = c.post("/check", headers=AUTH, json={"source": PAIRS[0][0], "target": PAIRS[0][1], "method": "gate"})
        assert again.status_code == 200, again.text
        assert pids and pids[0] != first and pids[0] == pool.pids()[0]
        metrics = c.get("/metrics", headers=AUTH).text
        assert 'halluscope_check_errors_total{method="gate",status="500"} 1.0' in metrics


def test_a_check_past_the_time_limit_has_its_process_killed(tmp_path):
    """The worker is stopped, so the check cannot finish: 504 at the limit, and its process is killed and replaced
    rather than left holding the slot (the new one answers; the next check there: the killed-worker test)."""
    with TestClient(make_app(tmp_path, cpu_workers=1, timeout_s=3.0), raise_server_exceptions=False) as c:
        pool = c.app.state.service.cpu
        first = pool.pids()[0]
        os.kill(first, signal.SIGSTOP)
        try:
            r = c.post("/check", headers=AUTH, json={"source": PAIRS[0][0], "target": PAIRS[0][1], "method": "gate"})
        finally:
            try:
                os.kill(first, signal.SIGCONT)  # were it still there, let it finish (it is killed already)
            except ProcessLookupError:
                pass
        assert r.status_code == 504, r.text
        assert pool.restarts == 1
        new = pool._slots[0].warm.result(60)  # the replacement has started and answered its first call
        assert new != first and pool.pids() == [new]
    with pytest.raises(ProcessLookupError):  # killed, and reaped
        for _ in range(200):
            os.kill(first, 0)
            time.sleep(0.05)


def test_stop_ends_the_worker_processes(tmp_path):
    with TestClient(make_app(tmp_path, cpu_workers=2)) as c:
        pids = c.app.state.service.cpu.pids()
    assert c.app.state.service.cpu.pids() == []
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            for _ in range(200):
                os.kill(pid, 0)
                time.sleep(0.05)


def test_stop_waits_for_idle_workers_to_exit_on_their_own():
    """An idle worker ends through its own exit (which releases its semaphores) before ``stop`` returns: it is
    neither killed nor ended halfway by the closed server pipe (the resource tracker then warned of "leaked
    semaphore objects")."""
    from halluscope.server.cpu_pool import CpuPool

    pool = CpuPool(1, Config(cache=False))
    pool.start()
    [pid] = pool.pids()
    killed = []
    real_kill = os.kill

    def watch_kill(target: int, sig: int) -> None:
        killed.append((target, sig))
        real_kill(target, sig)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "kill", watch_kill)
        pool.stop(grace_s=60.0)  # a generous bound: an idle worker exits at once
    assert killed == []
    with pytest.raises(ProcessLookupError):  # already exited, and reaped
        os.kill(pid, 0)


def test_serve_reads_cpu_workers_from_flags_and_the_environment(monkeypatch):
    from typer.testing import CliRunner

    from halluscope.cli.main import app as cli_app

    seen = {}
    monkeypatch.setattr("uvicorn.run", lambda app, **kwargs: seen.update(cpu=app.state.service.settings.cpu_workers))
    assert CliRunner().invoke(cli_app, ["serve"]).exit_code == 0
    assert seen["cpu"] == min(2, os.cpu_count() or 1)
    result = CliRunner().invoke(cli_app, ["serve", "--cpu-workers", "0"])
    assert result.exit_code == 0, result.output
    assert seen["cpu"] == 0
    monkeypatch.setenv("HALLUSCOPE_SERVER_CPU_WORKERS", "3")
    assert CliRunner().invoke(cli_app, ["serve"]).exit_code == 0 and seen["cpu"] == 3
    assert CliRunner().invoke(cli_app, ["serve", "--cpu-workers", "-1"]).exit_code == 2


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    from pathlib import Path

    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process tree from /proc (Linux)")
def test_worker_processes_end_when_the_server_is_killed(tmp_path):
    """A server killed with SIGKILL cannot stop its workers: they see the end of the pipe it held and exit rather
    than wait for work forever (and with them the fork server and the resource tracker)."""
    pytest.importorskip("uvicorn", reason="server extra not installed: pip install 'halluscope[server]'")
    from tests import loadtest

    with loadtest.start_server(tmp_path / "server", "--cpu-workers", "2", token=TOKEN) as server:
        r = httpx_post(server.url, {"source": PAIRS[0][0], "target": PAIRS[0][1], "method": "gate"})
        assert r.status_code == 200, r.text
        helpers = _children(server.pid)  # the fork server and multiprocessing's resource tracker
        workers = [w for h in helpers for w in _children(h)]
        assert len(workers) == 2, (helpers, workers)
        server.kill9()
    deadline = time.monotonic() + 60
    while any(_state(p) not in ("Z", "gone") for p in workers + helpers):
        if time.monotonic() > deadline:
            for p in workers:  # leave nothing behind, then fail
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            raise AssertionError(f"processes still running after the server was killed: {workers + helpers}")
        time.sleep(0.1)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def httpx_post(url: str, body: dict):
    import httpx

    return httpx.post(url + "/check", headers=AUTH, json=body, timeout=120)
