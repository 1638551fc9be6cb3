"""Structured logs: one JSON object per line, with the request id of the request being served."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from contextvars import ContextVar
from typing import Any

request_id: ContextVar[str | None] = ContextVar("halluscope_request_id", default=None)

log = logging.getLogger("halluscope.server")

_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def new_request_id(header: bytes | None) -> str:
    """The client's ``X-Request-ID`` when it is a short token of safe characters, else a fresh one."""
    if header:
        try:
            value = header.decode("ascii")
        except UnicodeDecodeError:
            value = ""
        if _CLIENT_ID.fullmatch(value):
            return value
    return uuid.uuid4().hex


def event(level: int, message: str, **fields: Any) -> None:
    """Log ``message`` with extra structured ``fields`` (they become keys of the JSON line)."""
    log.log(level, message, extra={"fields": fields, "request_id": request_id.get()})


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", "request_id"?, ...fields, "error"?}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        rid = getattr(record, "request_id", None) or request_id.get()
        if rid:
            data["request_id"] = rid
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            data.update(fields)
        if record.exc_info:
            data["error"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)


def log_config(level: str = "info", fmt: str = "json") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for uvicorn and halluscope: JSON lines (or plain text) on stderr."""
    formatter = (
        {"()": "halluscope.server.logs.JsonFormatter"}
        if fmt == "json"
        else {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    )
    handler = {"class": "logging.StreamHandler", "formatter": "main", "stream": "ext://sys.stderr"}
    level = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"main": formatter},
        "handlers": {"main": handler},
        "loggers": {
            "halluscope": {"handlers": ["main"], "level": level, "propagate": False},
            "uvicorn": {"handlers": ["main"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
        },
    }
