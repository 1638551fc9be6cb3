"""Web pages a browser can open once a token is set: a browser is sent to a login page that exchanges the token
for an HttpOnly, SameSite=Strict session cookie; the pages then open with that cookie, while the API keeps its
bearer header (a cookie never authorises a POST). Checked in-process and in headless Chromium (a screenshot)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")
uvicorn = pytest.importorskip("uvicorn", reason="server extra not installed: pip install 'halluscope[server]'")

from fastapi.testclient import TestClient  # noqa: E402 - after the importorskip of the server extra

from halluscope.config import Config  # noqa: E402
from halluscope.server import ServerSettings, create_app  # noqa: E402
from halluscope.server.login import COOKIE, session_value  # noqa: E402
from tests.cdp import CHROMIUM, Browser  # noqa: E402

TOKEN = "s3cret-token"
PAGE = {"accept": "text/html,application/xhtml+xml"}


def _app(tmp_path: Path):
    return create_app(Config(cache=False), ServerSettings(token=TOKEN, jobs_db=tmp_path / "jobs.sqlite"))


def test_a_browser_is_sent_to_the_login_page_and_back(tmp_path) -> None:
    with TestClient(_app(tmp_path), raise_server_exceptions=False, follow_redirects=False) as c:
        refused = c.get("/jobs/abc/report?x=1", headers=PAGE)
        assert refused.status_code == 303
        assert refused.headers["location"] == "/login?next=%2Fjobs%2Fabc%2Freport%3Fx%3D1"
        api = c.get("/", headers={"accept": "application/json"})
        assert api.status_code == 401, api.text  # an API client: 401 as before
        form = c.get("/login?next=/")
        assert form.status_code == 200 and 'name="token"' in form.text and 'type="password"' in form.text


def test_the_token_is_exchanged_for_an_httponly_samesite_cookie(tmp_path) -> None:
    with TestClient(_app(tmp_path), raise_server_exceptions=False, follow_redirects=False) as c:
        wrong = c.post("/login", data={"token": "guess", "next": "/"})
        assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
        right = c.post("/login", data={"token": TOKEN, "next": "/jobs"})
        assert right.status_code == 303 and right.headers["location"] == "/jobs"
        cookie = right.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}={session_value(TOKEN)};")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
        c.cookies.clear()
        assert c.get("/", headers=PAGE).status_code == 303  # no cookie: to the login page
        c.cookies.set(COOKIE, session_value(TOKEN))
        assert c.get("/", headers=PAGE).status_code == 200  # the pages open with the cookie
        assert c.get("/jobs").status_code == 200  # and the JSON they read
        body = {"source": "The cat sat.", "target": "The cat sat.", "method": "gate"}
        assert c.post("/check", json=body).status_code == 401  # the API keeps its bearer header
        assert c.post("/check", json=body, headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
        c.cookies.clear()
        c.cookies.set(COOKIE, session_value("another-token"))
        assert c.get("/", headers=PAGE).status_code == 303


def test_next_never_leaves_the_server(tmp_path) -> None:
    with TestClient(_app(tmp_path), raise_server_exceptions=False, follow_redirects=False) as c:
        for target in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
            answer = c.post("/login", data={"token": TOKEN, "next": target})
            assert answer.status_code == 303 and answer.headers["location"] == "/"


@pytest.fixture
def served(tmp_path):
    app = _app(tmp_path)
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
def test_login_in_headless_chromium(tmp_path, served) -> None:
    pytest.importorskip("websockets", reason="the DevTools protocol client needs websockets")
    browser = Browser(tmp_path / "profile", 900, 520)
    try:
        browser.open(f"{served}/")
        assert browser.wait_for("location.pathname === '/login' && !!document.getElementById('token')")
        shot = browser.screenshot(tmp_path / "login.png")
        browser.evaluate(f"document.getElementById('token').value = {TOKEN!r}; document.forms[0].submit(); 1")
        assert browser.wait_for("location.pathname === '/' && document.title.includes('halluscope')")
        assert browser.evaluate("document.cookie") == ""  # HttpOnly: no script reads it
        cookies = browser.call("Network.getAllCookies")["cookies"]
        (session,) = [c for c in cookies if c["name"] == COOKIE]
        assert session["httpOnly"] and session["sameSite"] == "Strict" and session["value"] != TOKEN
        assert browser.evaluate("document.body.innerText.includes('jobs')")
    finally:
        browser.close()
    assert shot.stat().st_size > 1000
    if os.environ.get("HALLUSCOPE_SCREENSHOTS"):  # docs/: keep the picture
        shutil.copy(shot, Path(os.environ["HALLUSCOPE_SCREENSHOTS"]) / "login.png")
