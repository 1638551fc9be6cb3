"""The HTTP protocol the service runs: uvicorn's h11 protocol with a header read timeout.

uvicorn bounds the time between requests on a kept-alive connection (``timeout_keep_alive``), but not the time a
request's headers take to arrive: headers sent at 1 byte a second held a connection open for ever (the body has
its own limit, :class:`~halluscope.server.guard.Guard`'s ``body_timeout_s``; the app sees a request only once its
headers are complete, so only the protocol can cut slow headers). Here a connection whose request headers are
not complete ``header_timeout_s`` after it opened (or after its previous response) is answered 408 and closed
(closed silently when it sent nothing)."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["header_timeout_protocol"]


def header_timeout_protocol(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol class with a header read timeout of ``timeout_s`` seconds (pass it as
    ``uvicorn.run(..., http=...)``)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutH11Protocol(H11Protocol):
        header_timeout_s = timeout_s

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._header_timer: asyncio.TimerHandle | None = None
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._bytes_since_arm = 0
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            timer = getattr(self, "_header_timer", None)
            if timer is not None:
                timer.cancel()
                self._header_timer = None

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE:  # a request's headers have started and are not complete
                if self._header_timer is None:
                    self._arm()  # (a kept-alive connection whose next request began before the timer was set)
                self._bytes_since_arm += len(data)
            else:
                self._disarm()  # the request's headers are complete

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._arm()  # the next request's headers get the same time

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            if self._bytes_since_arm and self.conn.our_state is h11.IDLE:
                body = b"request headers did not arrive in time\n"
                self.transport.write(
                    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
                )
            self.transport.close()

    return HeaderTimeoutH11Protocol
