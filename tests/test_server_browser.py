"""The job web report in a real headless browser (Debian's Chromium): the page renders, sorts by score in
the browser, and each item opens its span-highlight report. Skips when /usr/bin/chromium is absent
(``apt-get install chromium``)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")
pytest.importorskip("prometheus_client", reason="server extra not installed: pip install 'halluscope[server]'")
uvicorn = pytest.importorskip("uvicorn", reason="server extra not installed: pip install 'halluscope[server]'")

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium at /usr/bin/chromium (apt-get install chromium)"),
]

from halluscope.config import Config  # noqa: E402 - after the importorskip of the server extra
from halluscope.llm import LLM, FakeModel  # noqa: E402 - after the importorskip of the server extra
from halluscope.server import ServerSettings, create_app  # noqa: E402 - after the importorskip of the server extra
from tests.prompt_data import fenced  # noqa: E402 - after the importorskip of the server extra

SOURCE = "Alice founded Acme in 2001 in Paris. The company makes rockets."
YEAR = 'The text says "in 1999", but the source says 2001.'
CARS = 'The text says Acme makes "cars", which the source does not mention.'
ITEMS = [  # (target, the localizer's scripted descriptions)
    ("Zeta: Alice founded Acme in 1999. Acme makes rockets and cars.", [YEAR, CARS]),
    ("Beta: Alice founded Acme in 2001. Acme makes rockets.", []),
    ("Gamma: Alice founded Acme in 1999. It makes rockets.", [YEAR]),
    ("Delta: Acme makes rockets and cars, said Alice.", [CARS]),
]


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-extensions",
        f"--user-data-dir={tmp_path / 'profile'}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, timeout=120, text=True, check=False)


@pytest.fixture
def served_job(tmp_path):
    found_in = dict(ITEMS)  # the localizer's reply for the target it is asked about
    llm = LLM(
        FakeModel(
            by_reply={
                "LocalizationReply": lambda messages: json.dumps(
                    {"inconsistencies": found_in[fenced(messages, "target")]}
                )
            }
        )
    )
    app = create_app(Config(cache=False), ServerSettings(jobs_db=tmp_path / "jobs.sqlite"), llm=llm)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        import httpx

        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        items = [{"id": t.split(":")[0].lower(), "source": SOURCE, "target": t} for t, _ in ITEMS]
        job = httpx.post(
            f"{base}/jobs",
            json={"method": "localize", "options": {"style": "zero_shot"}, "items": items, "name": "browser check"},
            timeout=30,
        ).json()
        while time.monotonic() < deadline:
            info = httpx.get(f"{base}/jobs/{job['id']}", timeout=10).json()
            if info["status"] == "done":
                break
            time.sleep(0.05)
        assert info["status"] == "done" and info["scored"] == 4, info
        yield base, job["id"]
    finally:
        server.should_exit = True
        thread.join(15)


def test_job_report_renders_sorts_and_links_in_chromium(tmp_path, served_job):
    from PIL import Image

    base, job_id = served_job
    page = f"{base}/jobs/{job_id}/report#sort=score"
    shot = tmp_path / "job.png"
    run = _chromium(tmp_path, "--window-size=1200,800", f"--screenshot={shot}", page)
    assert shot.is_file(), run.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 800)
    raw = image.resize((300, 200)).tobytes()
    pixels = [raw[i : i + 3] for i in range(0, len(raw), 3)]
    colours = set(pixels)
    not_white = sum(1 for px in pixels if sum(px) < 3 * 235)
    assert len(colours) > 20 and not_white > 300, (len(colours), not_white)  # text, table, bar: not a blank page

    dom = _chromium(tmp_path, "--dump-dom", page).stdout
    assert 'data-sorted="score"' in dom, dom[:2000]  # the page's own script ran in the browser
    order = [int(part.split('"', 1)[0]) for part in dom.split('<tr data-index="')[1:]]
    assert order == [0, 2, 3, 1], order  # 1/3, 1/2, 1/2 (ties by index), 1.0
    assert 'href="items/0?format=html"' in dom

    item = f"{base}/jobs/{job_id}/items/0?format=html"
    item_shot = tmp_path / "item.png"
    _chromium(tmp_path, "--window-size=1200,800", f"--screenshot={item_shot}", item)
    assert item_shot.is_file()
    if os.environ.get("HALLUSCOPE_SCREENSHOTS"):  # keep the pictures for a look
        for png in (shot, item_shot):
            shutil.copy(png, Path(os.environ["HALLUSCOPE_SCREENSHOTS"]) / png.name)
    item_dom = _chromium(tmp_path, "--dump-dom", item).stdout
    assert '<mark class="' in item_dom and ">in 1999</mark>" in item_dom and ">cars</mark>" in item_dom
