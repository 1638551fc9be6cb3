"""The service's input hygiene and bounds: invisible-only text refused, ids validated (4xx, never 500), no server
path in an error body, only the models the operator allowed, CPU work off the HTTP loop, headers cut when slow."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")
pytest.importorskip("prometheus_client", reason="server extra not installed: pip install 'halluscope[server]'")

from fastapi.testclient import TestClient

from halluscope import methods
from halluscope.config import Config
from halluscope.llm import LLM, FakeModel
from halluscope.methods import Method
from halluscope.records import Report
from halluscope.server import ServerSettings, create_app

TOKEN = "t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SOURCE = "The council met on Monday. It approved the budget of $3 million for the new ferry."
TARGET = "The council met on Monday."
GEVAL_REPLY = '{"reason": "ok", "score": 5}'


def make_app(tmp_path, llm=None, config=None, **settings):
    settings.setdefault("token", TOKEN)
    settings.setdefault("jobs_db", tmp_path / "jobs.sqlite")
    return create_app(
        config or Config(cache=False), ServerSettings(**settings), llm=llm or LLM(FakeModel(default=GEVAL_REPLY))
    )


@pytest.fixture
def client(tmp_path):
    with TestClient(make_app(tmp_path), raise_server_exceptions=False) as c:
        yield c


# ------------------------------------------------------------------------------------------ invisible input


@pytest.mark.parametrize("text", ["\u200b\u200b\u2060\ufeff", " \u200d\n"])
def test_an_invisible_only_target_or_source_is_refused_422(client, text):
    for pair in ({"source": SOURCE, "target": text}, {"source": text, "target": TARGET}):
        r = client.post("/check", headers=AUTH, json={**pair, "method": "geval"})
        assert r.status_code == 422, r.text
        assert "empty" in r.json()["detail"]
    r = client.post("/check/batch", headers=AUTH, json={"items": [{"source": SOURCE, "target": text}]})
    assert r.status_code == 422 and "empty" in r.json()["detail"]
    # a job is not refused for one bad item: that item is unscored with the reason, like a row of `evaluate`
    r = client.post("/jobs", headers=AUTH, json={"items": [{"source": SOURCE, "target": text}]})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    for _ in range(600):  # at most 30 s; the item is settled before any model call
        job = client.get(f"/jobs/{job_id}", headers=AUTH).json()
        if job["status"] == "done":
            break
        time.sleep(0.05)
    assert job["status"] == "done", job
    (line,) = [json.loads(t) for t in client.get(f"/jobs/{job['id']}/results", headers=AUTH).text.splitlines()]
    report = Report.model_validate(line["report"])
    assert (job["unscored"], report.score) == (1, None) and "empty" in report.unscored_reason


# ------------------------------------------------------------------------------------------ ids and indexes


def test_out_of_range_item_indexes_are_4xx_never_500(client):
    r = client.post("/jobs", headers=AUTH, json={"items": [{"source": SOURCE, "target": TARGET}], "method": "rouge"})
    assert r.status_code == 202, r.text
    job = r.json()["id"]
    for index in ("99999999999999999999", str(2**63), "-1", "1e3", "x"):
        r = client.get(f"/jobs/{job}/items/{index}", headers=AUTH)
        assert r.status_code in (404, 422), (index, r.status_code, r.text)
    assert client.get(f"/jobs/{job}/items/{2**63 - 1}", headers=AUTH).status_code == 404
    for after in ("99999999999999999999", "-5"):
        assert client.get(f"/jobs/{job}/results?after={after}", headers=AUTH).status_code == 422
    for job_id in ("x" * 65, "%00", "99999999999999999999"):
        assert client.get(f"/jobs/{job_id}/items/0", headers=AUTH).status_code in (404, 422)


# ------------------------------------------------------------------------------------------ no server paths


def test_error_bodies_name_no_server_path(tmp_path, monkeypatch):
    secret = tmp_path / "srv" / "prompts"

    class Leaky(Method):
        name = "_leaky"
        uses_llm = False

        async def run(self, source: str, target: str) -> Report:
            raise ValueError(f"cannot read {secret}/geval.txt")

    monkeypatch.setitem(methods._REGISTERED, "_leaky", Leaky)
    data = tmp_path / "no-data-here"
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    app = make_app(tmp_path, data_dir=data, datasets_dir=datasets)
    with TestClient(app, raise_server_exceptions=False) as c:
        answers = [
            c.post("/check", headers=AUTH, json={"source": SOURCE, "target": TARGET, "method": "_leaky"}),
            c.post("/jobs", headers=AUTH, json={"dataset": "final:dev", "method": "rouge"}),
            c.post("/jobs", headers=AUTH, json={"dataset": "../../etc/x.jsonl", "method": "rouge"}),
            c.post(
                "/check/batch", headers=AUTH, json={"items": [{"source": SOURCE, "target": TARGET}], "method": "_leaky"}
            ),
        ]
    statuses = [a.status_code for a in answers]
    assert statuses[:3] == [422, 400, 400] and statuses[3] == 200, [a.text for a in answers]
    assert json.loads(answers[3].text.splitlines()[0])["status"] == 422
    for answer in answers:
        assert str(tmp_path) not in answer.text, answer.text
        assert "/srv/" not in answer.text and "no-data-here" not in answer.text
    assert "<server path>" in answers[0].text


def test_redaction_keeps_urls_and_relative_names():
    from halluscope.server.redact import redact_paths

    assert (
        redact_paths("see http://127.0.0.1:8080/v1/chat/completions") == "see http://127.0.0.1:8080/v1/chat/completions"
    )
    assert redact_paths("dataset file not found: sub/x.jsonl") == "dataset file not found: sub/x.jsonl"
    assert redact_paths("could not load '/opt/models/m.gguf'") == "could not load '<server path>'"
    assert redact_paths(r"C:\Users\me\m.gguf is missing") == "<server path> is missing"


# ------------------------------------------------------------------------------------------ allowed models


@pytest.mark.parametrize(
    "method, options",
    [
        ("dcr", {"verifier": "nli:/srv/models/anything"}),
        ("factscore", {"verifier": "nli:someone/unvetted-model"}),
        ("dcr", {"verifier": "nli", "verifier.checkpoint": "someone/unvetted-model"}),
        ("factscore", {"gate": "encoder:/srv/models/gate"}),
        ("probe", {"judges": ["fake", "someone-elses-model"]}),
        ("embed", {"embedding_model": "someone/big-embedder"}),
        ("improve", {"evaluator": "factscore", "evaluator_options": {"verifier": "seq2seq:someone/t5"}}),
        ("ensemble", {"combiner": "/srv/combiners/any.json"}),
    ],
)
def test_a_model_the_operator_did_not_allow_is_refused_403_before_loading(tmp_path, monkeypatch, method, options):
    import halluscope.methods.encoder_models as encoder_models

    loads = []
    monkeypatch.setattr(encoder_models, "load_checker", lambda *a: loads.append(a))
    app = make_app(tmp_path)
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post(
            "/check", headers=AUTH, json={"source": SOURCE, "target": TARGET, "method": method, "options": options}
        )
        assert r.status_code == 403, r.text
        assert "--allow-model" in r.json()["detail"] and "/srv/" not in r.text
        r = c.post(
            "/jobs",
            headers=AUTH,
            json={"items": [{"source": SOURCE, "target": TARGET}], "method": method, "options": options},
        )
        assert r.status_code == 403, r.text
        assert len(app.state.service.methods) == 0  # nothing was built
    assert loads == []


def test_an_allowed_model_passes_the_gate(tmp_path):
    options = {"judges": ["fake", "second-judge"]}
    for allowed, expected in (((), 403), (("second-judge",), 200), (("*",), 200)):
        app = make_app(tmp_path / str(expected) / str(len(allowed)), allowed_models=allowed)
        (tmp_path / str(expected) / str(len(allowed))).mkdir(parents=True, exist_ok=True)
        with TestClient(app, raise_server_exceptions=False) as c:
            r = c.post(
                "/check", headers=AUTH, json={"source": SOURCE, "target": TARGET, "method": "probe", "options": options}
            )
        assert (r.status_code == 403) == (expected == 403), (allowed, r.status_code, r.text[:300])


def test_the_default_verifier_and_own_model_need_no_allowance(client):
    r = client.post("/check", headers=AUTH, json={"source": SOURCE, "target": TARGET, "method": "geval", "options": {}})
    assert r.status_code == 200, r.text


def test_serve_reads_allow_model_from_flags_and_the_environment(monkeypatch):
    from typer.testing import CliRunner

    import halluscope.cli.serve as serve_cli
    from halluscope.cli.main import app as cli_app

    seen = {}

    def fake_run(app, **kwargs):
        seen["allowed"] = app.state.service.settings.allowed_models

    monkeypatch.setattr("uvicorn.run", fake_run)
    monkeypatch.setenv("HALLUSCOPE_SERVER_ALLOW_MODEL", "a/one b/two")
    result = CliRunner().invoke(cli_app, ["serve", "--port", "0"])
    assert result.exit_code == 0, result.output
    assert seen["allowed"] == ("a/one", "b/two")
    result = CliRunner().invoke(cli_app, ["serve", "--allow-model", "x,y", "--allow-model", "nli:z"])
    assert result.exit_code == 0 and seen["allowed"] == ("x", "y", "nli:z")
    assert serve_cli is not None


# ------------------------------------------------------------------------------------------ CPU work off the loop


@pytest.mark.parametrize(
    "method, module, function",
    [("gate", "halluscope.methods.gate", "split_sentences"), ("rouge", "halluscope.methods.rouge", "rouge_scores")],
)
def test_health_and_other_checks_are_answered_while_cpu_work_provably_runs(
    tmp_path, monkeypatch, method, module, function
):
    """One worker loop, no worker processes (``cpu_workers=0``: the thread path). The CPU stage of a ``gate`` (its
    sentence split) or ``rouge`` (its scoring) check is held inside the stage until the test releases it: /health
    and a geval check on the same worker are answered while it is provably still running (the stage runs on a
    thread, not on the worker's event loop). The process path: tests/test_server_cpu_pool.py."""
    import importlib
    import threading

    mod = importlib.import_module(module)
    real = getattr(mod, function)
    entered, release = threading.Event(), threading.Event()

    def held(*args, **kwargs):
        entered.set()
        assert release.wait(60), "never released"
        return real(*args, **kwargs)

    monkeypatch.setattr(mod, function, held)
    app = make_app(tmp_path, workers=1, cpu_workers=0)
    results: dict[str, int] = {}
    with TestClient(app, raise_server_exceptions=False) as c:

        def post(name, method_name):
            r = c.post("/check", headers=AUTH, json={"source": SOURCE, "target": TARGET, "method": method_name})
            results[name] = r.status_code

        heavy = threading.Thread(target=post, args=("heavy", method))
        heavy.start()
        try:
            assert entered.wait(30), "the CPU stage never started"
            assert c.get("/health").status_code == 200
            other = threading.Thread(target=post, args=("other", "geval"))
            other.start()
            other.join(30)
            assert not other.is_alive(), "a check on the same worker waited for the CPU stage"
            assert results["other"] == 200
            assert heavy.is_alive() and "heavy" not in results  # the CPU stage is still held
        finally:
            release.set()
            heavy.join(60)
    assert results["heavy"] == 200


# ------------------------------------------------------------------------------------------ header read timeout


class _Served:
    """The app under uvicorn with the service's protocol, on a loopback port, in a thread."""

    def __init__(self, app, header_timeout_s: float):
        import socket
        import threading

        import uvicorn

        from halluscope.server.protocol import header_timeout_protocol

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="on", http=header_timeout_protocol(header_timeout_s)
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self):
        import time

        self.thread.start()
        for _ in range(600):  # until started (polls the server's own flag, fails only after a generous limit)
            if self.server.started:
                return self
            time.sleep(0.05)
        raise AssertionError("server did not start")

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(30)


def _slow_headers(port: int, first: bytes, limit_s: float = 30.0) -> tuple[bytes, int]:
    """Send ``first``, then one more header byte every 0.1 s until the server closes the connection; the reply and
    the bytes sent. Fails only when the connection is still open after ``limit_s``."""
    import socket
    import time

    conn = socket.create_connection(("127.0.0.1", port))
    conn.settimeout(0.1)
    conn.sendall(first)
    sent, reply = len(first), b""
    deadline = time.monotonic() + limit_s
    try:
        while time.monotonic() < deadline:
            try:
                chunk = conn.recv(4096)
                if not chunk:
                    return reply, sent
                reply += chunk
            except TimeoutError:
                try:
                    conn.sendall(b"X")
                    sent += 1
                except OSError:
                    return reply, sent
            except OSError:
                return reply, sent
        raise AssertionError(f"headers sent slowly for {limit_s:.0f} s and the connection is still open")
    finally:
        conn.close()


def test_headers_sent_slowly_are_cut_with_408_while_others_are_served(tmp_path):
    import httpx

    with _Served(make_app(tmp_path), header_timeout_s=1.0) as served:
        reply, sent = _slow_headers(served.port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
        # httpx's 5 s default read timeout is a clock: a /check on a busy machine can take longer
        with httpx.Client(base_url=f"http://127.0.0.1:{served.port}", timeout=120.0) as c:
            assert c.get("/health").status_code == 200  # a client sending at once is served
            r = c.post("/check", headers=AUTH, json={"source": SOURCE, "target": TARGET, "method": "rouge"})
            assert r.status_code == 200
            assert c.get("/health").status_code == 200  # and again on the same kept-alive connection


def test_serve_passes_the_header_timeout_to_uvicorn(monkeypatch):
    from typer.testing import CliRunner

    from halluscope.cli.main import app as cli_app

    seen = {}
    monkeypatch.setattr("uvicorn.run", lambda app, **kwargs: seen.update(kwargs))
    result = CliRunner().invoke(cli_app, ["serve", "--header-timeout", "3"])
    assert result.exit_code == 0, result.output
    assert seen["http"].header_timeout_s == 3.0
