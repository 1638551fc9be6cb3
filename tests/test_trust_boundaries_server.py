"""Bounds a caller of the service cannot lift: the HTML report is linear in its findings, capped in size and made
within the check's time limit; the LLM calls of one check stay under the operator's ceiling whatever the request
asks; one bad job item never stalls its job (Redis and SQLite stores); a missing job item is 404 at any index; an
input table over its stated size is refused before it is read.

Offline: the package's fake model, a real ``redis-server`` on a loopback port where a test needs one (skipped with
the reason when it is not installed). Nothing here depends on speed but the one stated, generous time bound.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import threading
import time
import uuid

import pytest

from halluscope import report as report_module
from halluscope.config import Config
from halluscope.llm import LLM, FakeModel
from halluscope.records import Claim, Evidence, Example, Finding, Report, Span, Verdict
from halluscope.report import DEFAULT_LIMITS, RenderLimits, RenderTimeout, render_html
from tests.stage_fuzz import StageScript

SOURCE = "The council met on Monday. It approved the budget of $3 million for the new ferry."
TARGET = "The council met on Friday. It approved the budget of $3 million."
GEVAL_REPLY = '{"reason": "ok", "score": 4}'
TEXT = "The council met on Monday and approved the budget. " * 400  # 20,400 characters


def _findings_report(n: int, text_len: int, nested: bool = False) -> Report:
    """``n`` findings with overlapping target spans, each with its evidence in the source. ``nested``: every span
    holds the next (the worst case for covering: each piece lies under every span that began before it)."""
    findings = []
    for i in range(n):
        if nested:
            a, b = i, text_len - i
        else:
            a = (i * 7) % (text_len - 300)
            b = a + 40 + i % 200
        findings.append(
            Finding(
                description=f"finding {i}: not in the source",
                kind="unsupported" if i % 2 else "contradicted",
                target_spans=[Span(start=a, end=b)],
                evidence=[
                    Evidence(text="the budget", span=Span(start=a, end=min(text_len, a + 30)), relation="contradicts")
                ],
            )
        )
    return Report(method="fake", score=0.1, findings=findings)


def _html_part(page: str) -> str:
    """The page without the report data it embeds (which is the whole report, as the JSON report is)."""
    head, _, rest = page.partition('id="report-data">')
    return head + rest.partition("</script>")[2]


# --- the HTML report ------------------------------------------------------------------------------------------

RENDER_BOUND_S = 10.0  # stated in docs/limits.md; measured 0.13 s for 20,000 findings on the 2-core dev machine


def test_20000_findings_render_under_the_stated_time_capped_with_a_note():
    report = _findings_report(20_000, len(TEXT))
    started = time.perf_counter()
    page = render_html(report, TEXT, TEXT)
    took = time.perf_counter() - started
    assert took < RENDER_BOUND_S, took
    assert page.count("<li id='finding-") == DEFAULT_LIMITS.findings == 1000
    assert "Findings (20000)" in page
    assert "Showing the first 1,000 of 20,000 findings: 19,000 left out of this page" in page
    data = page.split('id="report-data">', 1)[1].split("</script>", 1)[0]
    assert len(json.loads(data)["findings"]) == 20_000  # the page's data keeps everything


def test_the_page_stops_growing_at_its_cap():
    """Past the cap more findings add nothing to the HTML but their count (the data keeps them)."""
    sizes = {n: len(_html_part(render_html(_findings_report(n, len(TEXT)), TEXT, TEXT))) for n in (2_000, 8_000)}
    assert abs(sizes[8_000] - sizes[2_000]) < 100, sizes
    assert sizes[8_000] < 6 * 2 * len(TEXT) + 2_000_000  # both texts escaped, plus the capped lists


def _line_events(fn) -> int:
    """Python lines executed by ``fn()`` (a count of work that does not depend on the machine's speed)."""
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def test_rendering_is_linear_in_findings_counted_in_lines_executed():
    """Uncapped, on nested spans (each piece covered by every span before it): doubling the findings about
    doubles the work; the quadratic renderer this replaced did 4x (every piece scanned every mark)."""
    lifted = RenderLimits(findings=10**9, claims=10**9, unscored=10**9)
    text = TEXT[:4000]
    work = {
        n: _line_events(lambda n=n: render_html(_findings_report(n, len(text), nested=True), text, text, limits=lifted))
        for n in (300, 600)
    }
    assert work[600] / work[300] < 2.5, work


def test_covering_marks_name_at_most_the_stated_number_and_count_the_rest():
    report = _findings_report(50, 200, nested=True)
    page = render_html(report, TEXT[:200], TEXT[:200])
    middle = page.split('id="target">', 1)[1]
    assert 'data-f="0 1 2 3 4 5 6 7"' in middle and "and 42 more" in middle
    assert 'data-f="0 1 2 3 4 5 6 7 8' not in middle


def test_highlight_markup_has_a_byte_budget_and_the_text_stays_whole():
    report = _findings_report(400, 4000, nested=True)
    page = render_html(report, TEXT[:4000], TEXT[:4000], limits=RenderLimits(markup_bytes=20_000))
    target = page.split('id="target">', 1)[1].split("</div></section>", 1)[0]
    assert "[highlights end here" in target and target.count("<mark ") < 150
    assert target.endswith(TEXT[3000:4000])  # the rest of the text, unmarked
    assert page.count("<li id='finding-") == 400  # the list is not cut by it


def test_a_render_past_its_deadline_stops_at_once(monkeypatch):
    clock = {"t": 0.0, "calls": 0}

    def fake_now() -> float:  # every look at the clock is one second later
        clock["calls"] += 1
        clock["t"] += 1.0
        return clock["t"]

    monkeypatch.setattr(report_module, "_now", fake_now)
    with pytest.raises(RenderTimeout):
        render_html(_findings_report(2_000, len(TEXT)), TEXT, TEXT, deadline=50.0)
    assert clock["calls"] == 51  # stopped at its first look past the deadline, nothing rendered after it
    render_html(_findings_report(5, len(TEXT)), TEXT, TEXT)  # without a deadline: never looks, never stops
    assert clock["calls"] == 51


def test_claims_and_unscored_lists_are_capped_too():
    claims = [Claim(text=f"claim {i}", target_spans=[Span(start=0, end=5)]) for i in range(30)]
    verdicts = [
        Verdict(claim=c, label="unscored" if i % 2 else "supported", reason="no reply") for i, c in enumerate(claims)
    ]
    page = render_html(
        Report(method="fake", score=0.5, verdicts=verdicts), TEXT, TEXT, limits=RenderLimits(claims=10, unscored=4)
    )
    assert "Showing the first 10 of 30 claims" in page and "Showing the first 4 of 15 unscored claims" in page
    assert page.count("<li id='unscored-") == 4 and "Unscored claims (15)" in page


# --- the service ----------------------------------------------------------------------------------------------

fastapi = pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")


def _client(settings=None, llm=None, **kw):
    from fastapi.testclient import TestClient

    from halluscope.server import ServerSettings, create_app

    settings = settings or ServerSettings(cpu_workers=0, **kw)
    app = create_app(Config(cache=False), settings, llm=llm or LLM(FakeModel(default=GEVAL_REPLY), cache=None))
    return TestClient(app)


def _wait_done(client, job_id: str, timeout_s: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while (job := client.get(f"/jobs/{job_id}").json())["status"] not in ("done", "failed"):
        assert time.monotonic() < deadline, job
        time.sleep(0.05)
    return job


def test_an_html_report_over_the_time_limit_is_a_clear_504_and_the_worker_goes_on(monkeypatch, tmp_path):
    """The render's clock always reads past the check's deadline: the HTML answer is a 504 naming the report
    and the JSON way out; the same worker then answers the next check (nothing kept rendering)."""
    with _client(jobs_db=tmp_path / "jobs.sqlite", workers=1) as client:
        body = {"source": SOURCE, "target": TARGET, "method": "rouge"}
        assert client.post("/check?format=html", json=body).status_code == 200
        monkeypatch.setattr(report_module, "_now", lambda: time.monotonic() + 10**6)
        r = client.post("/check?format=html", json=body)
        assert r.status_code == 504, r.text
        assert "HTML report" in r.json()["detail"] and "format=json" in r.json()["detail"]
        assert client.post("/check", json=body).status_code == 200  # the worker is free
        job = client.post("/jobs", json={"method": "rouge", "items": [{"source": SOURCE, "target": TARGET}]}).json()
        assert _wait_done(client, job["id"])["status"] == "done"
        r = client.get(f"/jobs/{job['id']}/items/0?format=html")
        assert r.status_code == 504 and "HTML report of item 0" in r.json()["detail"], r.text
        assert client.get(f"/jobs/{job['id']}/items/0").status_code == 200


LONG_TARGET = " ".join(f"The council met on day {i} and approved item {i}." for i in range(60))


@pytest.mark.parametrize("asked, expected", [(5000, 5), (0, 5), ("5000", 5), (2, 2), (None, 5)])
def test_a_request_can_lower_the_call_ceiling_never_raise_it(asked, expected, tmp_path):
    """The operator's ceiling of 5 calls per check: ``max_calls=5000`` (once 1,601 calls), 0 ("no limit") and
    none at all make at most 5 calls; 2 makes 2. Counted at the fake model."""
    script = StageScript()
    llm = LLM(FakeModel(responder=script), cache=None)
    options = {} if asked is None else {"max_calls": asked}
    with _client(llm=llm, jobs_db=tmp_path / "jobs.sqlite", max_calls=5) as client:
        r = client.post(
            "/check", json={"source": SOURCE, "target": LONG_TARGET, "method": "factscore", "options": options}
        )
        assert r.status_code == 200, r.text
        report = r.json()
    assert sum(script.asked.values()) == expected == len(report["calls"])
    assert report["score"] is None and f"budget of {expected} LLM calls" in report["unscored_reason"]


def test_a_job_runs_and_shows_its_options_within_the_ceiling(tmp_path):
    script = StageScript()
    with _client(
        llm=LLM(FakeModel(responder=script), cache=None), jobs_db=tmp_path / "j.sqlite", max_calls=3
    ) as client:
        items = [{"source": SOURCE, "target": LONG_TARGET}] * 2
        created = client.post("/jobs", json={"method": "factscore", "items": items, "options": {"max_calls": 5000}})
        assert created.status_code == 202, created.text
        assert created.json()["options"]["max_calls"] == 3
        job = _wait_done(client, created.json()["id"])
    assert job["unscored"] == 2 and sum(script.asked.values()) <= 2 * 3


def test_the_ceiling_rules():
    from halluscope.server import ServerSettings
    from halluscope.server.service import Service

    def capped(options, ceiling=100, config_calls=1000):
        service = Service(Config(cache=False, max_calls=config_calls), ServerSettings(cpu_workers=0, max_calls=ceiling))
        return service.capped(options).get("max_calls")

    assert capped({}) == 100  # the config's 1000 is over the ceiling
    assert capped({}, config_calls=50) is None  # under it: the method's own default, as before
    assert capped({}, config_calls=0) == 100  # the config's "no limit"
    assert capped({"max_calls": 10**9}) == 100 and capped({"max_calls": 0}) == 100 and capped({"max_calls": 7}) == 7
    assert capped({"max_calls": -1}) == -1 and capped({"max_calls": "x"}) == "x"  # left for the method to refuse (400)
    assert capped({"max_calls": 10**9}, ceiling=0) == 10**9  # 0: the operator set no ceiling


def test_no_method_option_names_a_cost_without_a_ceiling():
    """Retries, timeouts, concurrency and rates are the operator's (config and server settings): no method takes
    them as options, so a request cannot name them; ``max_calls`` is capped above. A new such option must come
    with its ceiling."""
    import re

    from halluscope.methods import list_methods, method_class

    cost = re.compile(r"retries|retry|timeout|concurren|per_minute|rate_limit|parallel|workers")
    named = {n: [f for f in method_class(n).Options.model_fields if cost.search(f)] for n in list_methods()}
    assert not any(named.values()), named


def test_a_missing_item_is_404_at_any_index(tmp_path):
    with _client(jobs_db=tmp_path / "jobs.sqlite") as client:
        job = client.post("/jobs", json={"method": "rouge", "items": [{"source": SOURCE, "target": TARGET}]}).json()
        _wait_done(client, job["id"])
        for index in ("1", str(2**63 - 1), str(2**63), "99999999999999999999"):
            r = client.get(f"/jobs/{job['id']}/items/{index}")
            assert r.status_code == 404 and "has no item" in r.json()["detail"], (index, r.text)
        for index in ("-1", "1e3", "x"):  # not an index at all
            assert client.get(f"/jobs/{job['id']}/items/{index}").status_code == 422
        assert client.get(f"/jobs/{job['id']}/items/0").status_code == 200


# --- dead letters ---------------------------------------------------------------------------------------------


def _pairs(n: int) -> list[Example]:
    return [Example(id=f"e{i}", source=SOURCE, target=f"The council met on day {i}.") for i in range(n)]


def _assert_one_dead_letter(client, job_id: str, index: int, reason: str) -> None:
    job = _wait_done(client, job_id)
    assert (job["status"], job["done"], job["scored"], job["unscored"], job["errors"]) == ("done", 120, 119, 1, 0)
    lines = [json.loads(t) for t in client.get(f"/jobs/{job_id}/results").text.splitlines()]
    assert len(lines) == 120
    dead = lines[index]
    assert dead["report"]["score"] is None and reason in dead["report"]["unscored_reason"], dead
    assert all(line["report"]["score"] is not None for i, line in enumerate(lines) if i != index)
    assert client.get(f"/jobs/{job_id}/items/{index}").status_code == 200
    assert client.get(f"/jobs/{job_id}/items/{index}?format=html").status_code == 409  # no texts to show
    assert client.get(f"/jobs/{job_id}/report").status_code == 200


def test_a_poisoned_sqlite_item_is_recorded_unscored_and_the_job_finishes(tmp_path):
    from halluscope.server.jobs import JobStore

    db = tmp_path / "jobs.sqlite"
    store = JobStore(db)
    job_id = store.create("geval", {}, _pairs(120))
    store.close()
    with sqlite3.connect(db) as conn:
        conn.execute('UPDATE items SET example = \'{"id": 5, "source":\' WHERE job_id = ? AND idx = 57', (job_id,))
    with _client(jobs_db=db) as client:
        _assert_one_dead_letter(client, job_id, 57, "item 57 could not be read: its stored data is not a valid item")


def test_a_sqlite_item_that_keeps_ending_its_server_is_recorded_unscored(tmp_path):
    """Item 1 was started 3 times and each run ended the server (a restart resumed it): with a limit of 3 it
    is recorded unscored with the reason at the next start, not run a fourth time; the others run."""
    from halluscope.server import ServerSettings
    from halluscope.server.jobs import JobStore

    db = tmp_path / "jobs.sqlite"
    store = JobStore(db)
    job_id = store.create("geval", {}, _pairs(3))
    assert [store.start_item(job_id, 1) for _ in range(3)] == [1, 2, 3]
    store.close()
    script = StageScript()
    settings = ServerSettings(cpu_workers=0, jobs_db=db, job_item_attempts=3)
    with _client(settings=settings, llm=LLM(FakeModel(responder=script), cache=None)) as client:
        job = _wait_done(client, job_id)
        lines = [json.loads(t) for t in client.get(f"/jobs/{job_id}/results").text.splitlines()]
    assert (job["status"], job["scored"], job["unscored"]) == ("done", 2, 1), job
    reason = lines[1]["report"]["unscored_reason"]
    assert "item 1 was started 3 times without a result" in reason and "the limit is 3" in reason
    assert sum(script.asked.values()) == 2  # one geval call for each of the two items that ran


def test_a_jobs_file_from_before_item_tries_gains_the_column(tmp_path):
    from halluscope.server.jobs import JobStore
    from halluscope.server.jobs.store import _SCHEMA

    db = tmp_path / "old.sqlite"
    with sqlite3.connect(db) as conn:
        conn.executescript(_SCHEMA.replace("tries INTEGER NOT NULL DEFAULT 0, ", ""))
    store = JobStore(db)
    job_id = store.create("geval", {}, _pairs(1))
    assert store.start_item(job_id, 0) == 1 and store.unfinished(job_id)[0][0] == 0
    store.close()


@pytest.fixture
def jobs_url(redis_url):
    pytest.importorskip("prometheus_client", reason="server extra not installed")
    return f"{redis_url}?prefix=tb:{uuid.uuid4().hex[:8]}:"


@pytest.mark.parametrize("poison", ["not json", "missing"])
def test_a_poisoned_redis_item_is_recorded_unscored_and_the_job_finishes(jobs_url, poison):
    """One item of 120 unreadable (once: 118/120 "running" for ever, the claim failing every poll) or gone from
    the store (once: acknowledged and never counted): 119 scored + 1 unscored with its reason, the job done."""
    import redis

    from halluscope.server import ServerSettings
    from halluscope.server.jobs.redis_store import RedisJobStore

    store = RedisJobStore(jobs_url)
    try:
        job_id = store.create("geval", {}, _pairs(120))
        raw = redis.Redis.from_url(store.url)
        items = store._k(job_id, "items")
        raw.hset(items, "57", "not json") if poison == "not json" else raw.hdel(items, "57")
        settings = ServerSettings(cpu_workers=0, jobs_url=jobs_url, job_lease_s=5.0, job_concurrency=4)
        with _client(settings=settings) as client:
            reason = "not a valid item" if poison == "not json" else "its data is missing from the job store"
            _assert_one_dead_letter(client, job_id, 57, reason)
            assert 'halluscope_job_queue_items_total{event="dead_letter"} 1.0' in client.get("/metrics").text
    finally:
        store.clear()
        store.close()


def test_an_item_handed_out_too_often_is_a_dead_letter_not_run_again(jobs_url):
    """An item whose runs never end with a result (each killed its replica) is, past ``max_attempts``
    deliveries, recorded unscored with the reason, without running it again."""
    from halluscope.server.jobs.queue_runner import QueueRunner
    from halluscope.server.jobs.redis_store import RedisJobStore

    store = RedisJobStore(jobs_url)
    job_id = store.create("geval", {}, _pairs(1))
    for consumer in ("a", "b", "c"):  # three replicas took it and died: their leases ran out
        (claim,) = store.claim(job_id, consumer, 1, lease_s=0.001)
        time.sleep(0.01)
    assert claim.attempt == 3
    ran = []

    async def run_item(method, example, job_id):
        ran.append(example.id)
        return Report(method="geval", score=1.0), '{"method": "geval", "score": 1.0}'

    async def build_method(name, options):
        return name

    runner = QueueRunner(
        store,
        build_method=build_method,
        run_item=run_item,
        max_running=1,
        concurrency=1,
        lease_s=0.01,
        consumer="d",
        max_attempts=3,
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    main = asyncio.run_coroutine_threadsafe(runner.main(), loop)
    try:
        deadline = time.monotonic() + 60
        while store.get(job_id)["status"] != "done":
            assert time.monotonic() < deadline, store.get(job_id)
            time.sleep(0.02)
    finally:
        asyncio.run_coroutine_threadsafe(runner.stop(1.0), loop).result(60)
        main.result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
    job = store.get(job_id)
    (row,) = store.results(job_id)
    reason = json.loads(row["report"])["unscored_reason"]
    store.clear()
    store.close()
    assert ran == [] and (job["unscored"], job["done"]) == (1, 1)
    assert "handed out 3 times without a result" in reason and "the limit is 3" in reason


# --- input tables ---------------------------------------------------------------------------------------------


def test_an_input_table_over_the_stated_size_is_refused_before_it_is_read(tmp_path):
    from typer.testing import CliRunner

    from halluscope.cli.main import app
    from halluscope.tabular import MAX_INPUT_BYTES

    big = tmp_path / "pairs.jsonl"
    with big.open("wb") as fh:  # sparse: no disk used, and nothing is read
        fh.truncate(MAX_INPUT_BYTES + 1)
    out, done = tmp_path / "out.jsonl", tmp_path / "ok.jsonl"
    result = CliRunner().invoke(app, ["check", "--input", str(big), "--output", str(out), "--method", "rouge"])
    assert result.exit_code == 2, result.output
    assert "over the 256 MiB an input table may hold" in result.output and not out.exists()
    small = tmp_path / "small.jsonl"
    small.write_text(json.dumps({"source": SOURCE, "target": TARGET}) + "\n")
    ok = CliRunner().invoke(app, ["check", "--input", str(small), "--output", str(done), "--method", "rouge"])
    assert ok.exit_code in (0, 1) and done.exists(), ok.output
