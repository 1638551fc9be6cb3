"""The Ray engine: same reports as the local engine, resume across engines, a driver killed with SIGKILL.

Tests marked ``ray`` start one local Ray instance for the module (``ray.init(num_cpus=2)``, bound to
127.0.0.1) and skip with the reason when Ray Data is not installed. The LLM is the scripted fake model
(built in each actor by ``llm_factory``) or a stub OpenAI-compatible endpoint on 127.0.0.1 that counts the
requests reaching it. Ray start-up and actor start-up dominate the time (~10 s and ~5 s per run on 2 cores).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from halluscope.bench.datasets import Dataset
from halluscope.bench.ray_engine import MethodSpec, RayEngine, RayEngineError, check_examples, example_from_row
from halluscope.bench.runner import ITEMS_FILE, ItemStore, run_bench
from halluscope.config import Config
from halluscope.llm import LLM, FakeModel, open_cache
from halluscope.methods import get_method
from halluscope.methods.geval import GevalReply
from tests.test_cache_backends import REQUEST_TAG, StubEndpoint, stub_reply, toy_examples, write_jsonl

REPO = Path(__file__).resolve().parents[1]
HAVE_RAY = importlib.util.find_spec("ray") is not None and importlib.util.find_spec("pyarrow") is not None
NO_RAY = "Ray Data not installed: pip install -e '.[ray]'"
skip_without_ray = pytest.mark.skipif(not HAVE_RAY, reason=NO_RAY)


def fake_llm(config: Config) -> LLM:
    """What every actor (and the driver) builds: the scripted fake model (G-Eval's ratings, by reply type) over the
    configured cache."""
    return LLM(
        FakeModel(by_reply={GevalReply: stub_reply}), cache=open_cache(config), max_concurrency=config.max_concurrency
    )


def _comparable(report) -> dict:
    """A report without what legitimately differs between two runs: timing, and whether a call was a cache hit."""
    data = report.model_dump(mode="json", exclude={"elapsed_s", "usage"})
    data["calls"] = [{"messages": c["messages"], "reply": c["reply"]} for c in data["calls"]]
    return data


@pytest.fixture
def time_limit():
    """Fail a Ray test after 150 s instead of hanging the suite (e.g. actors waiting for CPUs that never free)."""

    def expired(signum, frame):
        raise TimeoutError("Ray test ran past 150 s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(150)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def ray_cluster():
    if not HAVE_RAY:
        pytest.skip(NO_RAY)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # everything on 127.0.0.1
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def _wait_until_other_jobs_have_no_live_actor(deadline: float) -> None:
    """Wait until Ray's actor table shows every actor of other jobs (the killed driver's) dead: from then on
    nothing of that run can send a request. Polls a state; fails only at the generous deadline."""
    import ray
    from ray._private import state

    mine = ray.get_runtime_context().get_job_id()
    while True:
        alive = [
            a
            for a in state.actors().values()  # detached helpers (Ray Data's stats actor) outlive any job
            if a.get("State") != "DEAD" and not a.get("IsDetached") and str(a.get("JobID", "")) != str(mine)
        ]
        if not alive:
            return
        assert time.monotonic() < deadline, f"actors of the killed driver still alive: {alive}"
        time.sleep(0.05)


N_KILL, ANSWER_FIRST, SLOTS = 40, 12, 4  # items; requests the stub answers before it holds; actors x concurrency


@pytest.fixture(scope="module")
def driver_to_kill(ray_cluster, tmp_path_factory):
    """``halluscope bench --engine ray`` on 40 items in a child process, against a stub that answers 12
    requests and then holds every later one (so the run cannot finish before the kill test kills it). Started
    before the other Ray test so that the child's start-up (imports, actors) overlaps it."""
    tmp = tmp_path_factory.mktemp("kill")
    data = write_jsonl(tmp / "toy.jsonl", toy_examples(N_KILL))
    out, cache_path = tmp / "run", tmp / "cache.sqlite"
    with StubEndpoint(hold_after=ANSWER_FIRST) as stub:
        env = {**os.environ, "HALLUSCOPE_CACHE_PATH": str(cache_path), "XDG_CACHE_HOME": str(tmp / "xdg")}
        driver = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "halluscope.cli.main",
                "bench",
                "--dataset",
                str(data),
                "--method",
                "geval",
                "--model",
                "stub",
                "--base-url",
                stub.base_url,
                "--out",
                str(out),
                "--engine",
                "ray",
                "--address",
                ray_cluster,
                "--actors",
                "2",
                "--actor-concurrency",
                "2",
                "--actor-cpus",
                "0.5",
                "--bootstrap",
                "0",
                "--no-progress",
            ],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            yield {"stub": stub, "driver": driver, "tmp": tmp, "out": out, "cache_path": cache_path}
        finally:
            if driver.poll() is None:
                driver.kill()
            driver.wait(timeout=30)
            driver.stderr.close()


# --- without a cluster ----------------------------------------------------------------------------------


def test_ray_and_redis_are_not_imported_by_halluscope():
    code = (
        "import sys, halluscope, halluscope.bench.runner, halluscope.bench.ray_engine, halluscope.cli.main; "
        "print('ray' in sys.modules, 'redis' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.stdout.strip() == "False False", out.stderr


def test_worker_refuses_to_build_a_different_method(tmp_path):
    config = Config(cache_path=tmp_path / "c.sqlite")
    method = get_method("geval", llm=fake_llm(config), config=config, max_tokens=64)
    spec = MethodSpec.of(method, llm_factory=fake_llm)
    rebuilt = spec.build(max_concurrency=3)
    assert rebuilt.options() == method.options() and rebuilt.llm.max_concurrency == 3
    with pytest.raises(RayEngineError, match="llm_factory"):  # the fake LLM cannot be rebuilt from the Config
        MethodSpec.of(method).build()
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "geval.txt").write_text("Rate it.\n$source\n$target\n$format")
    other = MethodSpec(
        type(method), method.options(), config.with_overrides(prompts_dir=prompts), fake_llm, spec.expect
    )  # e.g. a prompt override folder that differs on a worker node
    with pytest.raises(RayEngineError, match="prompt_version"):
        other.build()


def test_example_from_row_accepts_json_or_columns():
    import numpy as np

    ex = toy_examples(1)[0]
    assert example_from_row({"id": ex.id, "example": ex.model_dump_json()}) == ex
    row = {
        "id": np.int64(7),
        "source": "S.",
        "target": "T.",
        "label": np.int64(1),
        "descriptions": np.array(["d"]),
        "gold_spans": [{"start": 0, "end": 1}],
        "origin": "crawl",
    }
    got = example_from_row(row)
    assert got.id == "7" and got.label == 1 and got.descriptions == ["d"] and got.gold_spans[0].end == 1
    assert got.meta == {"origin": "crawl"}


def test_engine_options_are_checked():
    with pytest.raises(ValueError):
        RayEngine(actors=0)
    assert RayEngine(actors=4).per_actor(32) == 8 and RayEngine(actors=3, actor_concurrency=5).per_actor(32) == 5


# --- on a local Ray instance ----------------------------------------------------------------------------


@pytest.mark.ray
@skip_without_ray
@pytest.mark.usefixtures("ray_cluster", "driver_to_kill", "time_limit")
def test_python_entry_point_scores_a_ray_dataset_like_the_local_engine(tmp_path):
    import ray

    examples = toy_examples(6)
    rows = [{"id": ex.id, "source": ex.source, "target": ex.target, "label": ex.label} for ex in examples]
    config = Config(cache_path=tmp_path / "ray.sqlite")
    reports = check_examples(
        ray.data.from_items(rows),
        "geval",
        config=config,
        llm_factory=fake_llm,
        actors=1,
        actor_concurrency=3,
        cpus_per_actor=0.5,
        skip_ids={"ex5"},
    )
    local_config = Config(cache_path=tmp_path / "local.sqlite")  # a fresh cache: both runs really call the model
    local = get_method("geval", llm=fake_llm(local_config), config=local_config)
    assert sorted(reports) == [f"ex{i}" for i in range(5)]  # ex5 skipped, as when resuming
    for ex in examples[:5]:
        expected = asyncio.run(local.acheck_example(ex))
        assert _comparable(reports[ex.id]) == _comparable(expected)
        assert reports[ex.id].usage == expected.usage and reports[ex.id].usage.calls == 1
    assert [reports[f"ex{i}"].score for i in range(4)] == [0.25, 1.0, 0.25, 1.0]


@pytest.mark.ray
@skip_without_ray
@pytest.mark.usefixtures("time_limit")
def test_killed_driver_resumes_with_no_item_lost_and_no_call_repeated(tmp_path, driver_to_kill, monkeypatch):
    """``halluscope bench --engine ray`` in a child process is killed with SIGKILL mid-run (4 requests in
    flight); the run resumes (here, on the Ray engine) with every item exactly once in items.jsonl and no
    request that was answered before the kill sent again; then the local engine on the same cache gives the
    same reports and metrics without one LLM call."""
    from halluscope.bench import plots

    for name in ("roc_plot", "violin_plot"):  # the metrics are the point here; drawing PNGs costs seconds
        monkeypatch.setattr(plots, name, lambda *args, **kwargs: tmp_path / "no-plot.png")
    n = N_KILL
    stub, driver, out, cache_path = (driver_to_kill[k] for k in ("stub", "driver", "out", "cache_path"))
    items = out / ITEMS_FILE
    deadline = time.monotonic() + 120
    # every slot waiting on a held request means every answered reply was received and cached
    while not (stub.held == SLOTS and items.is_file() and items.read_text().count("\n") >= 4):
        assert driver.poll() is None, driver.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, f"the Ray run did not get going ({stub.held} requests held)"
        time.sleep(0.02)
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=30)
    _wait_until_other_jobs_have_no_live_actor(deadline=time.monotonic() + 120)
    assert stub.held == SLOTS  # the dead driver's actors, now gone, sent nothing more (an event, not a pause)
    stub.release()  # the held requests are answered to no one: their replies never reach the cache

    done_at_kill = len(ItemStore(items).load())
    assert 0 < done_at_kill < n, f"the kill did not land mid-run ({done_at_kill} of {n} items done)"
    with sqlite3.connect(cache_path) as db:
        cached = {
            REQUEST_TAG.search(json.loads(row[0])["text"]).group(1)
            for row in db.execute("SELECT completion FROM responses")
        }
    answered_before = {d[:16] for d in stub.arrived[:ANSWER_FIRST]}
    assert cached == answered_before
    arrived_before = len(stub.arrived)

    config = Config(model="stub", base_url=stub.base_url, cache_path=cache_path)
    engine = RayEngine(actors=1, actor_concurrency=SLOTS, cpus_per_actor=0.5)  # one actor: one process to start
    resumed = asyncio.run(
        run_bench(
            get_method("geval", config=config),
            Dataset("toy", None, toy_examples(n)),
            out,
            progress=False,
            n_bootstrap=0,
            engine=engine,
            suite_names=["binary"],
        )
    )
    resent = [d[:16] for d in stub.arrived[arrived_before:]]
    assert not set(resent) & answered_before, "a request answered before the kill was sent again"
    assert len(resent) == len(set(resent)) and len({d[:16] for d in stub.arrived}) == n
    lines = [json.loads(line)["example_id"] for line in items.read_text().splitlines()]
    assert sorted(lines) == sorted(f"ex{i}" for i in range(n))  # every item, each exactly once
    assert resumed["n"] == n and resumed["n_unscored"] == 0 and resumed["engine"] == "ray"
    assert resumed["usage_this_run"]["items_run"] == n - done_at_kill

    total = len(stub.arrived)
    local = asyncio.run(
        run_bench(
            get_method("geval", config=config),
            Dataset("toy", None, toy_examples(n)),
            tmp_path / "local",
            progress=False,
            n_bootstrap=0,
            suite_names=["binary"],
        )
    )
    assert len(stub.arrived) == total and local["usage"]["calls"] == 0
    assert local["metrics"] == resumed["metrics"] and local["metrics"]["binary"]["auc"]["value"] == 1.0
    ray_reports, local_reports = ItemStore(items).load(), ItemStore(tmp_path / "local" / ITEMS_FILE).load()
    assert {k: _comparable(v) for k, v in ray_reports.items()} == {k: _comparable(v) for k, v in local_reports.items()}
    print(
        f"\nkill/resume: {done_at_kill}/{n} items in items.jsonl at the kill, {ANSWER_FIRST} requests answered and "
        f"cached, {SLOTS} in flight; after the resume {len(resent)} requests, 0 of them answered before"
    )
