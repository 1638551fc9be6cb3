"""The pure ASGI middleware in front of every route: request id, auth, body limits, admission, logs, metrics.

Everything it refuses, it refuses **before the body is read** (the body is only ever read by the route,
through a ``receive`` that counts it):

1. 401 when the route needs the token and the ``Authorization`` header is missing or wrong (compared as
   bytes in constant time, so a non-ASCII header is just wrong, not a 500);
2. 413 when ``Content-Length`` is above the route's limit (400 when it is not a number);
3. 503 + Retry-After when too many requests are open at once (probes excepted).

A body must arrive within ``body_timeout_s`` (all of it, not per chunk): a client sending 1 byte a second gets
408 and the connection is closed. For the check routes a slot is taken only once the whole body has arrived
(so slow senders hold no slot): 429 + Retry-After when every slot is busy and the queue is full, 503 +
Retry-After after waiting ``queue_timeout_s`` for one.

A body without Content-Length (chunked) is counted as it arrives; past the limit the request ends with 413
at once and the rest is never read. Early refusals carry ``Connection: close`` so the unread body cannot
be taken for the next request. Every answer carries ``X-Request-ID`` (the client's, when it sent a sane
one); every request gives one JSON log line and updates the request metrics.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from typing import Any

from starlette.routing import Match

from halluscope.server.admission import QueueFull, QueueTimeout
from halluscope.server.login import cookie_session, login_location, wants_page
from halluscope.server.logs import event, new_request_id, request_id
from halluscope.server.service import Service

PUBLIC = frozenset(
    {"/health", "/ready", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json", "/login", "/logout"}
)
PROBES = frozenset({"/health", "/ready", "/metrics"})
WORK = frozenset({("POST", "/check"), ("POST", "/improve"), ("POST", "/check/batch"), ("POST", "/guard")})


class BodyTooLarge(Exception):
    pass


class BodyTimeout(Exception):
    pass


class Guard:
    def __init__(self, app: Any, service: Service):
        self.app = app
        self.service = service

    def _route(self, scope: dict[str, Any]) -> str:
        partial = None
        for route in self.service.routes:
            match, _ = route.matches(scope)
            if match is Match.FULL:
                return route.path
            if match is Match.PARTIAL and partial is None:
                partial = route.path
        return partial or "unmatched"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:  # noqa: C901 - the ASGI guard's admission order (auth, limits, queue) reads as one sequence
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        svc, settings = self.service, self.service.settings
        headers: dict[bytes, list[bytes]] = {}
        for name, value in scope.get("headers", []):
            headers.setdefault(name.lower(), []).append(value)
        rid = new_request_id((headers.get(b"x-request-id") or [None])[0])
        token = request_id.set(rid)
        started = time.perf_counter()
        route = self._route(scope)
        method = scope.get("method", "GET")
        state: dict[str, Any] = {
            "status": 0,
            "started": False,
            "received": 0,
            "over": False,
            "replaced": False,
            "body_done": False,
        }
        limit = settings.body_limit(route)
        has_body = bool(headers.get(b"transfer-encoding")) or any(
            v.strip() not in (b"", b"0") for v in headers.get(b"content-length", [])
        )

        async def send_tagged(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                if state["over"] and not state["started"]:  # the route answered a body cut short: say why
                    state["replaced"] = True
                    await _plain(send_tagged_raw, 413, f"request body exceeds {limit} bytes", close=True)
                    return
                state["status"], state["started"] = message["status"], True
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            elif state["replaced"]:
                return
            await send(message)

        async def send_tagged_raw(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                state["status"], state["started"] = message["status"], True
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(message)

        deadline = started + settings.body_timeout_s
        work = (method, route) in WORK

        async def receive_counted() -> dict[str, Any]:
            nonlocal slot
            if state["body_done"]:
                return await receive()  # after the body: disconnect notices, never cut
            remaining = deadline - time.perf_counter()
            try:
                if remaining <= 0:
                    raise TimeoutError
                message = await asyncio.wait_for(receive(), remaining)
            except TimeoutError:
                raise BodyTimeout from None
            if message["type"] == "http.request":
                state["received"] += len(message.get("body", b""))
                if state["received"] > limit:
                    state["over"] = True
                    raise BodyTooLarge
                if not message.get("more_body", False):
                    state["body_done"] = True
                    if work and not slot:
                        await svc.admission.acquire()  # only now: a slow sender never holds a slot
                        slot = True
            return message

        opened = slot = False
        try:
            refusal = self._refusal(route, method, headers, limit)
            if refusal is not None:
                status, detail, extra, reason = refusal
                svc.metrics.refused.labels(reason).inc()
                if status == 401 and wants_page(method, headers):  # a browser: to the login page, then back
                    query = scope.get("query_string", b"").decode("latin-1")
                    extra = {**extra, "location": login_location(scope.get("path", "/"), query)}
                    status = 303
                await _plain(send_tagged_raw, status, detail, extra, close=has_body)
                return
            if route not in PROBES:  # probes are always answered
                if svc.open_requests >= settings.max_open_requests:
                    svc.metrics.refused.labels("too_many_requests").inc()
                    await _plain(
                        send_tagged_raw,
                        503,
                        f"{settings.max_open_requests} requests are open; retry later",
                        {"retry-after": str(settings.retry_after_s)},
                        close=has_body,
                    )
                    return
                svc.open_requests += 1
                svc.metrics.open_requests.inc()
                opened = True
            svc.ensure_started()
            await self.app(scope, receive_counted, send_tagged)
            if state["over"] and not state["started"]:
                await _plain(send_tagged_raw, 413, f"request body exceeds {limit} bytes", close=True)
        except QueueFull:
            svc.metrics.refused.labels("queue_full").inc()
            if not state["started"]:
                await _plain(
                    send_tagged_raw,
                    429,
                    f"all {settings.max_in_flight} check slots are busy and {settings.max_queue} "
                    "requests wait; retry later",
                    {"retry-after": str(settings.retry_after_s)},
                )
        except QueueTimeout:
            svc.metrics.refused.labels("queue_timeout").inc()
            if not state["started"]:
                await _plain(
                    send_tagged_raw,
                    503,
                    f"no check slot freed up within {settings.queue_timeout_s:g}s; retry later",
                    {"retry-after": str(settings.retry_after_s)},
                )
        except BodyTimeout:
            svc.metrics.refused.labels("body_timeout").inc()
            if not state["started"]:
                await _plain(
                    send_tagged_raw,
                    408,
                    f"the request body did not arrive within {settings.body_timeout_s:g}s",
                    close=True,
                )
        except BodyTooLarge:
            svc.metrics.refused.labels("body_too_large").inc()
            if not state["started"]:
                await _plain(send_tagged_raw, 413, f"request body exceeds {limit} bytes", close=True)
        except Exception:
            if state["over"]:  # the route failed reading a body cut short
                svc.metrics.refused.labels("body_too_large").inc()
                if not state["started"]:
                    await _plain(send_tagged_raw, 413, f"request body exceeds {limit} bytes", close=True)
            else:
                logging.getLogger("halluscope.server").exception("unhandled error")
                if not state["started"]:
                    await _plain(send_tagged_raw, 500, f"internal error (request id {rid})")
        finally:
            if slot:
                svc.admission.release()
            if opened:
                svc.open_requests -= 1
                svc.metrics.open_requests.dec()
            elapsed = time.perf_counter() - started
            status = state["status"] or 499  # 499: the client went away before an answer
            svc.metrics.observe_request(route, method, status, elapsed)
            event(
                logging.WARNING if status >= 500 else logging.INFO,
                "request",
                method=method,
                route=route,
                path=scope.get("path", ""),
                status=status,
                duration_ms=round(elapsed * 1000, 1),
                body_bytes=state["received"],
                client=(scope.get("client") or ("", 0))[0],
            )
            request_id.reset(token)

    def _refusal(
        self, route: str, method: str, headers: dict[bytes, list[bytes]], limit: int
    ) -> tuple[int, str, dict[str, str], str] | None:
        settings = self.service.settings
        public = route in PUBLIC or (route == "/metrics" and settings.metrics_public)
        if settings.token is not None and not public:
            expected = b"Bearer " + settings.token.encode("utf-8")
            given = headers.get(b"authorization") or []
            bearer = len(given) == 1 and hmac.compare_digest(given[0], expected)
            page = method in ("GET", "HEAD") and cookie_session(headers, settings.token)  # pages only, never writes
            if not (bearer or page):
                return 401, "missing or wrong bearer token", {"www-authenticate": "Bearer"}, "unauthorized"
        lengths = {v.strip() for v in headers.get(b"content-length", [])}
        if lengths:
            if len(lengths) > 1 or not all(v.isdigit() for v in lengths):
                return 400, "Content-Length is not one number", {}, "bad_length"
            declared = int(next(iter(lengths)))
            if declared > limit:
                return (
                    413,
                    f"request body of {declared} bytes exceeds the limit of {limit} bytes for {route}",
                    {},
                    "body_too_large",
                )
        return None


async def _plain(
    send: Any, status: int, detail: str, headers: dict[str, str] | None = None, close: bool = False
) -> None:
    body = json.dumps({"detail": detail}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    if close:
        raw.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
