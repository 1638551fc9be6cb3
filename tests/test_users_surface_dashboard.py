"""The dashboard at `/`: jobs with method, model, start time, duration, items, inconsistent, unscored, a score
histogram per job, filters by status and method, and links to each job's report and from there to every item's
span-highlight report. Served by the same app; checked in-process and in headless Chromium (screenshots)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")
pytest.importorskip("prometheus_client", reason="server extra not installed: pip install 'halluscope[server]'")
uvicorn = pytest.importorskip("uvicorn", reason="server extra not installed: pip install 'halluscope[server]'")

from fastapi.testclient import TestClient  # noqa: E402 - after the importorskip of the server extra

from halluscope.server.dashboard import histogram_svg  # noqa: E402
from tests.cdp import CHROMIUM, Browser  # noqa: E402
from tests.test_server_jobs import make_app, wait_for_job  # noqa: E402

SOURCE = "The ferry runs every 30 minutes. Tickets cost 3 pounds. The service is run by Harbour Lines."
GATE_ITEMS = [
    {"id": "fast", "source": SOURCE, "target": "The ferry runs every 15 minutes."},
    {"id": "owner", "source": SOURCE, "target": "The service is run by Northwind Marine."},
    {"id": "tickets", "source": SOURCE, "target": "Tickets cost 3 pounds."},
]
RATED = [{"id": "one", "source": SOURCE, "target": "Tickets cost 3 pounds."}]
TOKEN = "dash-token"
BEARER = {"authorization": f"Bearer {TOKEN}"}


def _jobs(client: TestClient) -> tuple[str, str]:
    gate = client.post("/jobs", json={"method": "gate", "items": GATE_ITEMS, "name": "gate run"})
    rated = client.post("/jobs", json={"method": "geval", "items": RATED, "name": "rated run"})
    assert gate.status_code == 202 and rated.status_code == 202, (gate.text, rated.text)
    for job in (gate, rated):
        wait_for_job(client, job.json()["id"])
    return gate.json()["id"], rated.json()["id"]


def _row(page: str, job_id: str) -> str:
    match = re.search(rf'<tr data-id="{job_id}".*?</tr>', page, re.S)
    assert match, page[:3000]
    return match.group(0)


def test_the_dashboard_shows_each_job_with_its_counts_times_model_and_histogram(tmp_path) -> None:
    client = TestClient(make_app(tmp_path))
    gate_id, rated_id = _jobs(client)
    page = client.get("/").text
    gate = _row(page, gate_id)
    cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", gate, re.S)]
    assert cells[:3] == ["gate run", "done", "gate"] and cells[3] == "–"  # gate: no model
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", cells[4]) and cells[5].endswith(" s")
    assert cells[6:10] == ["3/3", "2", "0", "0"]  # done/total, inconsistent, unscored, errors
    assert gate.count("<rect ") == 10 and "1 item scored" in gate
    assert f'href="/jobs/{gate_id}/report"' in gate
    rated = _row(page, rated_id)
    assert "<td>geval</td><td>fake</td>" in rated  # the model that checked it, from its reports


def test_the_filters_by_method_and_status(tmp_path) -> None:
    client = TestClient(make_app(tmp_path))
    gate_id, rated_id = _jobs(client)
    only_gate = client.get("/?method=gate").text
    assert f'data-id="{gate_id}"' in only_gate and f'data-id="{rated_id}"' not in only_gate
    assert '<option value="gate" selected>gate</option>' in only_gate
    none = client.get("/?status=failed").text
    assert "No job matches these filters." in none and 'data-id="' not in none
    assert client.get("/?status=nonsense").status_code == 422


def test_the_histogram_bins_scores_from_0_to_1() -> None:
    svg = histogram_svg([0.0, 0.05, 0.55, 1.0])
    assert svg.count("<rect ") == 10
    assert "2 items scored 0.0–0.1" in svg and "1 item scored 0.5–0.6" in svg and "1 item scored 0.9–1.0" in svg
    assert "–" in histogram_svg([])


@pytest.fixture
def served(tmp_path):
    app = make_app(tmp_path, token=TOKEN)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium at /usr/bin/chromium (apt-get install chromium)")
def test_the_dashboard_and_an_item_report_in_headless_chromium(tmp_path, served) -> None:
    pytest.importorskip("websockets", reason="the DevTools protocol client needs websockets")
    import httpx

    with httpx.Client(base_url=served, headers=BEARER, timeout=30) as api:
        ids = [
            api.post("/jobs", json=body).json()["id"]
            for body in (
                {"method": "gate", "items": GATE_ITEMS, "name": "gate run"},
                {"method": "geval", "items": RATED, "name": "rated run"},
            )
        ]
        deadline = time.monotonic() + 60
        while any(api.get(f"/jobs/{i}").json()["status"] != "done" for i in ids) and time.monotonic() < deadline:
            time.sleep(0.1)
    browser = Browser(tmp_path / "profile", 1300, 560)
    try:
        browser.open(f"{served}/")
        browser.wait_for("location.pathname === '/login'")
        browser.evaluate(f"document.getElementById('token').value = {TOKEN!r}; document.forms[0].submit(); 1")
        browser.wait_for("location.pathname === '/' && document.querySelectorAll('svg.hist').length === 2")
        dashboard = browser.screenshot(tmp_path / "dashboard.png")
        assert browser.evaluate("document.querySelectorAll('tbody tr').length") == 2
        browser.open(f"{served}/?method=gate")
        assert browser.evaluate("document.querySelectorAll('tbody tr').length") == 1
        browser.evaluate("document.querySelector('tbody tr a').click(); 1")  # the job's report
        browser.wait_for(f"location.pathname === '/jobs/{ids[0]}/report'")
        browser.wait_for("!!document.querySelector('#items a')")
        browser.evaluate("document.querySelector('#items tbody tr a').click(); 1")  # an item's own report
        browser.wait_for("location.pathname.includes('/items/') && !!document.querySelector('mark')")
        marked = browser.evaluate("Array.from(document.querySelectorAll('#target mark')).map(m => m.textContent)")
        assert marked and all(m.strip() for m in marked)
        item = browser.screenshot(tmp_path / "item.png")
    finally:
        browser.close()
    assert dashboard.stat().st_size > 1000 and item.stat().st_size > 1000
    if os.environ.get("HALLUSCOPE_SCREENSHOTS"):  # docs/: keep the pictures
        for png in (dashboard, item):
            shutil.copy(png, Path(os.environ["HALLUSCOPE_SCREENSHOTS"]) / png.name)
