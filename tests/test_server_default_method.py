"""A request that names no method runs what ``halluscope check`` and ``halluscope.check`` run: the config's
``method`` if set, else ``dcr`` verdict-first (the request's options over that), unless the operator set
``--default-method``; on /check, /check/batch and jobs alike."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")
pytest.importorskip("prometheus_client", reason="server extra not installed: pip install 'halluscope[server]'")

from fastapi.testclient import TestClient

import halluscope
from halluscope.cli.main import app as cli
from halluscope.config import DEFAULT_METHOD, DEFAULT_METHOD_OPTIONS, Config
from halluscope.llm import LLM, FakeModel
from halluscope.records import Report
from halluscope.server import ServerSettings, create_app
from tests.test_verdict_probabilities import SOURCE, TARGET, verdict_first_fake

YES = {"build a ferry": 0.9, "own budget": 0.2}  # P(yes) per claim: the second one is flagged
GEVAL_REPLY = '{"reason": "ok", "score": 4}'
PAIR = {"source": SOURCE, "target": TARGET}


@pytest.fixture(autouse=True)
def here(tmp_path, monkeypatch):
    """No config file and no HALLUSCOPE_* setting from the machine running the tests."""
    monkeypatch.chdir(tmp_path)
    for key in [k for k in __import__("os").environ if k.startswith("HALLUSCOPE_")]:
        monkeypatch.delenv(key)
    return tmp_path


def make_app(tmp_path, llm, config: Config | None = None, **settings):
    settings.setdefault("jobs_db", tmp_path / "jobs.sqlite")
    settings.setdefault("cpu_workers", 0)
    return create_app(config or Config(cache=False), ServerSettings(**settings), llm=llm)


def wait_for_job(client: TestClient, job_id: str, timeout_s: float = 30) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.get(f"/jobs/{job_id}").json()
        if job["status"] in ("done", "failed", "cancelled"):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job not finished in {timeout_s}s: {job}")


def test_a_request_without_a_method_runs_dcr_verdict_first_as_halluscope_check(tmp_path):
    expected = halluscope.check(SOURCE, TARGET, config=Config(cache=False), llm=LLM(verdict_first_fake(YES)))
    assert expected.method == DEFAULT_METHOD == "dcr" and expected.score is not None
    app = make_app(tmp_path, LLM(verdict_first_fake(YES)))
    with TestClient(app) as client:
        r = client.post("/check", json=PAIR)
        assert r.status_code == 200, r.text
        report = Report.model_validate(r.json())
        assert report.method == "dcr" and report.details["verdict_first"]["flagged"] == ["s2"]
        assert report.score == pytest.approx(expected.score) and report.label == expected.label
        assert [v.label for v in report.verdicts] == [v.label for v in expected.verdicts]
        assert len(report.findings) == len(expected.findings) == 1
        # the same instance as an explicit dcr with order=verdict_first (one cache key)
        explicit = client.post("/check", json={**PAIR, "method": "dcr", "options": {"order": "verdict_first"}})
        assert explicit.status_code == 200 and explicit.json()["score"] == pytest.approx(expected.score)
        assert len(app.state.service.methods) == 1
        # the request's options go over the default ones, as -o does on the command line
        stricter = client.post("/check", json={**PAIR, "options": {"explain_below": 0.95}})
        assert stricter.status_code == 200, stricter.text
        flagged = stricter.json()["details"]["verdict_first"]["flagged"]
        assert stricter.json()["method"] == "dcr" and flagged == ["s1", "s2"]
        # a batch and a job without a method run the same
        batch = client.post("/check/batch", json={"items": [PAIR, {**PAIR, "id": "b"}]})
        lines = [json.loads(line) for line in batch.text.splitlines()]
        assert batch.status_code == 200 and len(lines) == 2
        assert all(line["status"] == 200 and line["report"]["method"] == "dcr" for line in lines)
        assert all(line["report"]["score"] == pytest.approx(expected.score) for line in lines)
        created = client.post("/jobs", json={"items": [PAIR]})
        assert created.status_code == 202, created.text
        assert (created.json()["method"], created.json()["options"]) == ("dcr", DEFAULT_METHOD_OPTIONS)
        job = wait_for_job(client, created.json()["id"])
        assert job["status"] == "done" and job["scored"] == 1
        (line,) = [json.loads(x) for x in client.get(f"/jobs/{job['id']}/results").text.splitlines()]
        assert line["report"]["method"] == "dcr" and line["report"]["score"] == pytest.approx(expected.score)
        assert "verdict_first" in line["report"]["details"]
        assert len(app.state.service.methods) == 2  # the default and the one with explain_below


def test_resolve_is_the_clis_resolution_unless_the_operator_sets_a_default(tmp_path):
    service = make_app(tmp_path, LLM(FakeModel(default=GEVAL_REPLY))).state.service
    assert service.resolve(None, {}) == ("dcr", {"order": "verdict_first"})
    mine = {"order": "reason_first", "top_k": 2}
    assert service.resolve(None, mine) == ("dcr", mine)
    assert service.resolve("dcr", {}) == ("dcr", {})  # a named method runs with its own defaults
    operator = make_app(tmp_path / "o", LLM(FakeModel(default=GEVAL_REPLY)), default_method="geval").state.service
    assert operator.resolve(None, {}) == ("geval", {})  # no implied options
    assert operator.resolve(None, {"max_tokens": 64}) == ("geval", {"max_tokens": 64})
    assert operator.resolve("rouge", {}) == ("rouge", {})
    from_file = make_app(tmp_path / "f", None, config=Config(cache=False, method="gate")).state.service
    assert from_file.resolve(None, {"top_k": 2}) == ("gate", {"top_k": 2})


def test_openapi_names_the_default_and_not_geval(tmp_path):
    spec = TestClient(make_app(tmp_path, LLM(FakeModel(default=GEVAL_REPLY)))).get("/openapi.json").json()
    for record in ("CheckRequest", "BatchRequest", "JobRequest"):
        text = spec["components"]["schemas"][record]["properties"]["method"]["description"]
        assert "`dcr` with `order=verdict_first`" in text and "--default-method" in text and "geval" not in text


# -- through `halluscope serve` ---------------------------------------------------------------------------------


@pytest.fixture
def served(monkeypatch):
    """Run `serve` up to where it would start uvicorn; keep the config and settings it would have served."""
    import uvicorn

    import halluscope.server as server

    seen: dict = {}
    monkeypatch.setattr(server, "create_app", lambda config, settings: seen.update(config=config, settings=settings))
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)
    monkeypatch.setattr("halluscope.cli.serve._check_writable", lambda folder: None)

    def serve(*args: str, env: dict[str, str] | None = None):
        seen.clear()
        result = CliRunner().invoke(cli, ["serve", "--cpu-workers", "0", *args], env=env)
        return result, seen.get("config"), seen.get("settings")

    return serve


def test_serve_default_method_flag_still_gives_geval(served, tmp_path):
    result, config, settings = served("--jobs-db", str(tmp_path / "jobs.sqlite"), "--default-method", "geval")
    assert result.exit_code == 0, result.output
    assert settings.default_method == "geval"
    with TestClient(create_app(config, settings, llm=LLM(FakeModel(default=GEVAL_REPLY)))) as client:
        r = client.post("/check", json=PAIR)
        assert r.status_code == 200, r.text
        assert r.json()["method"] == "geval" and r.json()["score"] == pytest.approx(0.75)  # 4 on 1..5
    # the old spelling and the variable set it too; none of them leaves it unset; an unknown method stops the start
    assert served("--method", "rouge")[2].default_method == "rouge"
    assert served(env={"HALLUSCOPE_SERVER_METHOD": "gate"})[2].default_method == "gate"
    assert served()[2].default_method is None
    assert served(env={"HALLUSCOPE_SERVER_METHOD": ""})[2].default_method is None
    unknown = served("--default-method", "no-such")[0]
    assert unknown.exit_code == 2 and "unknown method 'no-such'" in unknown.output


def test_a_config_file_method_is_the_services_default_as_it_is_the_clis(served, here):
    (here / "halluscope.toml").write_text('method = "gate"\ncache = false\n', encoding="utf-8")
    (here / "s.txt").write_text(SOURCE, encoding="utf-8")
    (here / "t.txt").write_text(TARGET, encoding="utf-8")
    checked = CliRunner().invoke(cli, ["check", "-s", "s.txt", "-t", "t.txt", "--json", "--no-progress"])
    assert checked.exit_code in (0, 1), checked.output
    by_cli = Report.model_validate_json(checked.stdout)
    assert by_cli.method == "gate"
    result, config, settings = served("--jobs-db", str(here / "jobs.sqlite"))
    assert result.exit_code == 0, result.output
    assert config.method == "gate" and settings.default_method is None
    with TestClient(create_app(config, settings)) as client:
        r = client.post("/check", json=PAIR)
        assert r.status_code == 200, r.text
        report = Report.model_validate(r.json())
        assert report.method == "gate" and report.score == pytest.approx(by_cli.score)
        assert report.label == by_cli.label
        # the operator's --default-method wins over the file's method
    _, config, settings = served("--jobs-db", str(here / "jobs2.sqlite"), "--default-method", "rouge")
    with TestClient(create_app(config, settings)) as client:
        assert client.post("/check", json=PAIR).json()["method"] == "rouge"
