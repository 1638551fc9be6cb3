"""The HTTP service (``halluscope serve``; needs the ``server`` extra: FastAPI, uvicorn, prometheus-client).

Routes: ``POST /check``, ``POST /improve`` (Report JSON, or the web report with ``?format=html``),
``POST /check/batch`` (NDJSON streamed as each pair finishes), background jobs persisted in SQLite
(``POST /jobs``, ``GET /jobs/{id}``, ``/results``, ``/report``, ``DELETE``) that survive restarts,
``/metrics`` (Prometheus), ``/health``, ``/ready`` and OpenAPI docs at ``/docs``. Limits and auth are
enforced before a body is read (``guard.py``). See docs/service.md.

Modules: ``app`` (routes), ``service`` (the work), ``guard`` (ASGI middleware: auth, limits, admission,
logs, request metrics), ``jobs`` (SQLite store and runner), ``workers`` (event loops off the HTTP loop),
``instances`` (bounded method cache), ``metrics``, ``logs``, ``pages`` (job web report). The stub
OpenAI-compatible endpoint and the load-test helpers are test code, outside the package (``tests/stub_server.py``,
``tests/loadtest/``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from halluscope.server.settings import ServerSettings

if TYPE_CHECKING:
    from halluscope.server.app import create_app

__all__ = ["ServerSettings", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":  # imports FastAPI: only when asked for
        from halluscope.server.app import create_app

        return create_app
    raise AttributeError(name)
