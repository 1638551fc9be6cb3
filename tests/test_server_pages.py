"""The service meets RAG users where they are: a source as a list of chunks (evidence names its chunk), a job
item with bad input kept as an unscored item, and a jobs page at ``GET /`` (escaped, behind the same token)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")
pytest.importorskip("prometheus_client", reason="server extra not installed: pip install 'halluscope[server]'")

from fastapi.testclient import TestClient

from halluscope.records import Report
from tests.test_server_jobs import SOURCE, make_app, wait_for_job

CHUNKS = ["Paris is the capital of France.", "It has 2.1 million inhabitants."]
ANSWER = "Paris has 9 million inhabitants."


def test_check_takes_a_list_of_chunks_and_names_the_chunk_of_each_evidence(tmp_path) -> None:
    client = TestClient(make_app(tmp_path))
    answer = client.post("/check", json={"source": CHUNKS, "target": ANSWER, "method": "gate"})
    assert answer.status_code == 200, answer.text
    report = Report.model_validate(answer.json())
    assert len(report.source_chunks) == 2 and report.label == "inconsistent"
    assert {e.chunk for f in report.findings for e in f.evidence} <= {0, 1}
    assert any(e.chunk is not None for f in report.findings for e in f.evidence)
    page = client.post("/check?format=html", json={"source": CHUNKS, "target": ANSWER, "method": "gate"})
    assert page.status_code == 200 and "It has 2.1 million inhabitants." in page.text
    bad = client.post("/check", json={"source": [], "target": ANSWER, "method": "gate"})
    assert bad.status_code == 422 and "empty list" in bad.json()["detail"]


def test_a_job_item_with_bad_input_is_an_unscored_item_not_a_refused_job(tmp_path) -> None:
    client = TestClient(make_app(tmp_path))
    items = [{"id": "good", "source": CHUNKS, "target": ANSWER}, {"id": "empty", "source": " ", "target": ANSWER}]
    created = client.post("/jobs", json={"method": "gate", "items": items})
    assert created.status_code == 202, created.text
    job = wait_for_job(client, created.json()["id"])
    assert (job["total"], job["scored"], job["unscored"], job["errors"]) == (2, 1, 1, 0)
    lines = [json.loads(t) for t in client.get(f"/jobs/{job['id']}/results").text.splitlines()]
    assert [line["status"] for line in lines] == [200, 200]
    good, empty = (Report.model_validate(line["report"]) for line in lines)
    assert good.source_chunks and empty.score is None and empty.unscored_reason == "bad input: source is empty"


def test_the_jobs_page_lists_jobs_escaped_and_behind_the_token(tmp_path) -> None:
    client = TestClient(make_app(tmp_path))
    empty = client.get("/")
    assert empty.status_code == 200 and "No jobs yet" in empty.text
    created = client.post(
        "/jobs",
        json={
            "method": "rouge",
            "name": "<script>alert(1)</script>",
            "items": [{"source": SOURCE, "target": "The council met on Monday."}],
        },
    )
    job = wait_for_job(client, created.json()["id"])
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<script>alert(1)</script>" not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert f'href="/jobs/{job["id"]}/report"' in page.text and ">done<" in page.text
    guarded = TestClient(make_app(tmp_path / "t", token="secret"))
    assert guarded.get("/").status_code == 401
    assert guarded.get("/", headers={"Authorization": "Bearer secret"}).status_code == 200
