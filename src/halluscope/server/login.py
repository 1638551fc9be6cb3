"""Web pages a browser can open when the service has a token: ``GET /login`` asks for the token once and answers
with an HttpOnly, SameSite=Strict session cookie; the pages (``GET``/``HEAD``) then accept that cookie, while the
API keeps its ``Authorization: Bearer`` header (a cookie never authorises a ``POST`` or ``DELETE``).

The cookie holds no token: it is an HMAC-SHA256 of the token (a new token ends every session). A browser asking
for a page without it is sent to the login page (303), and back to that page once logged in.
"""

from __future__ import annotations

import hashlib
import hmac
import html
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

COOKIE = "halluscope_session"
SESSION_S = 12 * 3600
"""How long a session cookie lasts: a working day; the token itself does not expire."""


def session_value(token: str) -> str:
    """The cookie's value for ``token``: derived from it, never the token itself."""
    return hmac.new(token.encode("utf-8"), b"halluscope web session v1", hashlib.sha256).hexdigest()


def cookie_session(headers: dict[bytes, list[bytes]], token: str) -> bool:
    """Whether the request's ``Cookie`` header(s) carry the session of ``token``."""
    expected = session_value(token).encode()
    for header in headers.get(b"cookie", []):
        for part in header.split(b";"):
            name, _, value = part.strip().partition(b"=")
            if name == COOKIE.encode() and hmac.compare_digest(value.strip(), expected):
                return True
    return False


def wants_page(method: str, headers: dict[bytes, list[bytes]]) -> bool:
    """A browser asking for a page (``GET`` accepting HTML), which a refusal sends to the login page."""
    return method in ("GET", "HEAD") and any(b"text/html" in a for a in headers.get(b"accept", []))


def safe_next(path: str | None) -> str:
    """Where to go after logging in: a path on this server only (never ``//host`` or a URL elsewhere)."""
    if not path or not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return path


def login_location(path: str, query: str = "") -> str:
    """The login page's address, coming back to ``path`` (with its query) afterwards."""
    target = path + (f"?{query}" if query else "")
    return "/login?next=" + quote(safe_next(target), safe="")


def session_cookie(token: str, secure: bool) -> str:
    """The ``Set-Cookie`` value of a new session (``Secure`` when the request came over HTTPS)."""
    flags = f"; Max-Age={SESSION_S}; Path=/; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")
    return f"{COOKIE}={session_value(token)}{flags}"


def cleared_cookie() -> str:
    return f"{COOKIE}=; Max-Age=0; Path=/; HttpOnly; SameSite=Strict"


def form_fields(body: bytes) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body's fields (first value of each)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return {}
    return {k: v[0] for k, v in parse_qs(text, keep_blank_values=True, max_num_fields=10).items()}


def token_matches(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))


_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:0;background:#fafafa;color:#1d1d1f}
form{max-width:360px;margin:80px auto;background:#fff;border:1px solid #ddd;border-radius:8px;padding:24px}
h1{font-size:18px;margin:0 0 14px}label{display:block;font-size:13px;color:#555;margin-bottom:6px}
input[type=password]{width:100%;box-sizing:border-box;padding:8px;font-size:14px;border:1px solid #bbb}
button{margin-top:14px;padding:8px 16px;font-size:14px;border:0;border-radius:4px;background:#0a66c2;color:#fff}
.bad{color:#b00020;font-size:13px;margin-top:10px}.muted{color:#777;font-size:12px;margin-top:14px}"""


def render_login_page(next_path: str, message: str | None = None) -> str:
    """The login form: the server's token, sent once, exchanged for a session cookie."""
    error = f'<div class="bad" role="alert">{html.escape(message)}</div>' if message else ""
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>halluscope · log in</title>
<style>{_CSS}</style></head><body>
<form method="post" action="/login"><h1>halluscope</h1>
<label for="token">The server's token (HALLUSCOPE_SERVER_TOKEN)</label>
<input type="password" id="token" name="token" autocomplete="current-password" autofocus required>
<input type="hidden" name="next" value="{html.escape(safe_next(next_path), quote=True)}">
<button type="submit">Log in</button>{error}
<div class="muted">A session cookie (HttpOnly, SameSite=Strict) opens the pages for 12 hours; the API still
takes the token as an Authorization: Bearer header.</div></form></body></html>"""


def add_login_routes(app: FastAPI, service: Any) -> None:
    """``GET /login`` (the form), ``POST /login`` (the token for a session cookie, then back to ``next``) and
    ``GET /logout`` on ``app``. Without a server token there is nothing to log in to: both go to ``next``."""

    @app.get("/login", tags=["pages"], response_class=HTMLResponse, summary="The login page of the web pages.")
    async def login_page(next: str = Query("/", max_length=2000)) -> Response:  # noqa: A002 - the usual name
        if service.settings.token is None:
            return RedirectResponse(safe_next(next), status_code=303)
        return HTMLResponse(render_login_page(next))

    @app.post(
        "/login",
        tags=["pages"],
        response_class=HTMLResponse,
        summary="Exchange the token (form field `token`) for an HttpOnly, SameSite=Strict session cookie.",
    )
    async def login(request: Request) -> Response:
        fields = form_fields(await request.body())
        target = safe_next(fields.get("next"))
        token = service.settings.token
        if token is None:
            return RedirectResponse(target, status_code=303)
        if not token_matches(fields.get("token", ""), token):
            return HTMLResponse(render_login_page(target, "That is not the server's token."), status_code=401)
        answer = RedirectResponse(target, status_code=303)
        answer.headers.append("set-cookie", session_cookie(token, request.url.scheme == "https"))
        return answer

    @app.get("/logout", tags=["pages"], summary="End the browser's session (its cookie) and show the login page.")
    async def logout() -> Response:
        answer = RedirectResponse("/login", status_code=303)
        answer.headers.append("set-cookie", cleared_cookie())
        return answer
