"""One redactor for every text a report or an error message carries: no credential and, on a server, no file path
of that server reaches whoever reads it.

:func:`redact_credentials` masks what authenticates a caller: a URL's userinfo (``http://admin:pw@host`` becomes
``http://***@host``), the values of secret-looking query parameters and ``name=value`` / ``"name": "value"`` pairs
(names with a part ``key``, ``token``, ``secret``, ``password``, ``pwd``, ``sig``, ``signature``, ``auth``,
``credential``, ``session``: ``api-key``, ``api_key``, ``access_token``, ``X-Amz-Signature``...; see
:func:`secret_name`), bearer tokens and authorization header values, and API keys by their well-known prefixes
(``sk-...``, ``hf_...``, ``ghp_...``, ``AKIA...``, ``xox?-...``). :func:`redact_paths` replaces server file paths
by ``<server path>``. :func:`redact` applies the first and, with ``paths``, the second; :func:`redact_report`
applies it to the texts a :class:`~halluscope.records.Report` carries beside the caller's own input: the unscored
reason, the verdicts' reasons, the findings' descriptions, the raw replies kept for audit (also the messages of a
repair request, which send a reply back and quote it), the model names and every string in ``details``. Claims,
evidence quotes and the prompts are the caller's own text (their spans index into it) and are left as they are.

Every report passes through it, so prompt markup is taken out here too (:mod:`halluscope.text.markup`):
:class:`~halluscope.methods.base.Method` masks credentials (the library, the CLI),
the service also redacts its paths (:mod:`halluscope.server.redact`), and an :class:`~halluscope.llm.base.LLMError`'s
message is masked when it is made.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.records import Report

__all__ = [
    "MASK",
    "REDACTED",
    "redact",
    "redact_credentials",
    "redact_paths",
    "redact_report",
    "register_root",
    "secret_name",
]

REDACTED = "<server path>"
MASK = "***"

_SECRET_PARTS = frozenset(
    {
        "key",
        "apikey",
        "token",
        "secret",
        "password",
        "passwd",
        "pwd",
        "sig",
        "signature",
        "auth",
        "authorization",
        "credential",
        "credentials",
        "session",
        "sessionid",
        "cookie",
    }
)
_SECRET_ENDINGS = ("apikey", "accesskey", "privatekey", "token", "secret", "password", "passwd", "signature")


def secret_name(name: str) -> bool:
    """A parameter or field name whose value is a secret: one of its parts (split at ``_``, ``-``, ``.`` and
    camel case) is ``key``, ``token``, ``secret``, ``password``, ``sig``, ``auth``, ``credential``, ``session``...
    (``api-key``, ``api_key``, ``access_token``, ``X-Amz-Signature``, ``sessionId``), or it ends in one of the
    longer ones (``apikey``, ``accesstoken``); ``monkey``, ``design`` and ``author`` are not."""
    parts = {p.lower() for p in re.split(r"[_.\-]+|(?<=[a-z])(?=[A-Z])", name) if p}
    return bool(parts & _SECRET_PARTS) or name.lower().endswith(_SECRET_ENDINGS)


_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#@'\"<>]+@")
_PAIR = re.compile(r"(?<![\w.-])([A-Za-z][\w.-]*)(\s*=\s*)([^&\s'\"<>,;)\]}]+)")
_QUOTED = re.compile(r"([\"'])([A-Za-z][\w.-]*)\1(\s*:\s*)([\"'])((?:(?!\4)[^\\]|\\.)*)\4")
_BEARER = re.compile(r"(?i)\b(bearer)(\s+)(?=\S*[\d._~+/=-])[A-Za-z0-9._~+/=-]{8,}")
_AUTH_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization|x-api-key|api-key)(\s*:\s*)((?:bearer|basic|token|digest)\s+)?[^\s,;'\"]+"
)
_KEYS = re.compile(
    r"\b(?:(?:sk|rk|pk)-[A-Za-z0-9_-]{8,}|hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{16,}|AKIA[0-9A-Z]{16}"
    r"|xox[abprs]-[A-Za-z0-9-]{8,})"
)

_KEY_MARKERS = ("sk-", "rk-", "pk-", "hf_", "gh", "AKIA", "xox")

_ABSOLUTE = re.compile(
    r"(?<![\w./\\-])(?:~|/(?!/))(?:[^\s'\"`/\\:,;()\[\]{}<>|]*/)+[^\s'\"`/\\:,;()\[\]{}<>|]*"  # /a/b, ~/a, /a/
    r"|(?<![\w])[A-Za-z]:\\(?:[^\s'\"`\\:,;()\[\]{}<>|]+\\?)+"  # C:\a\b
    r"|(?<![\w./\\-])/(?!/)(?:tmp|home|root|work|data|srv|opt|usr|var|etc|mnt|app|models|Users|private)\b[^\s'\"`,;]*"
)
"""An absolute path: two or more segments after a leading ``/`` or ``~`` (``/srv/models``, ``/data/``), a Windows
drive path, or one well-known top folder (``/data``), also after a colon (``nli:/srv/m``). A URL's path
(``http://host/v1/chat``) is not one: it follows ``://`` or a letter."""

_ROOTS: set[str] = set()
_ROOTS_LOCK = threading.Lock()


def register_root(path: str | os.PathLike[str] | None) -> None:
    """A folder of this server (data, datasets, jobs, cache, prompts) whose name is redacted even where the
    general pattern would not see it whole (a folder name with spaces)."""
    if path is None:
        return
    with _ROOTS_LOCK:
        for form in {str(path), str(Path(path).expanduser().resolve())}:
            if len(form) > 1:
                _ROOTS.add(form.rstrip("/\\") or form)


def redact_paths(text: str) -> str:
    """``text`` with every server path replaced by ``<server path>``."""
    with _ROOTS_LOCK:
        roots = sorted(_ROOTS, key=len, reverse=True)
    for root in roots:
        if root in text:
            text = text.replace(root, REDACTED)
    if "/" not in text and "\\" not in text and "~" not in text:
        return text
    return _ABSOLUTE.sub(REDACTED, text)


def redact_credentials(text: str) -> str:
    """``text`` with URL userinfo, secret-looking parameter values, authorization values and API keys masked."""
    lower = text.lower()  # each pattern runs only where its marker occurs (most texts hold none)
    if "://" in text and "@" in text:
        text = _USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    if ":" in text and ('"' in text or "'" in text):
        text = _QUOTED.sub(_masked_quoted, text)
    if "=" in text:
        text = _PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}" if secret_name(m.group(1)) else m.group(0), text)
    if "authorization" in lower or "api-key" in lower:
        text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3) or ''}{MASK}", text)
    if "bearer" in lower:
        text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    if any(marker in text for marker in _KEY_MARKERS):
        text = _KEYS.sub(MASK, text)
    return text


def _masked_quoted(m: re.Match[str]) -> str:
    if not secret_name(m.group(2)) or not m.group(5):
        return m.group(0)
    q, value_q = m.group(1), m.group(4)
    return f"{q}{m.group(2)}{q}{m.group(3)}{value_q}{MASK}{value_q}"


def redact(text: str, *, paths: bool = False) -> str:
    """``text`` with its credentials masked and, with ``paths`` (a server's answer), its server paths redacted."""
    text = redact_credentials(text)
    return redact_paths(text) if paths else text


def _walk(value: Any, paths: bool) -> Any:
    if isinstance(value, str):
        return redact(value, paths=paths)
    if isinstance(value, dict):
        return {k: _walk(v, paths) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, paths) for v in value]
    if type(value) is tuple:
        return tuple(_walk(v, paths) for v in value)
    return value


def _text(value: str | None, paths: bool) -> str | None:
    return None if value is None else redact(value, paths=paths)


def _messages(messages: list[dict[str, Any]], paths: bool) -> list[dict[str, Any]]:
    """A call's messages with everything from the first model reply on redacted (a repair request sends the reply
    back and quotes it); the prompt before it is the caller's text and the templates, left as it is."""
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    out = list(messages[:first])
    for m in messages[first:]:
        content = m.get("content")
        redacted = redact(content, paths=paths) if isinstance(content, str) else content
        out.append(m if redacted == content else {**m, "content": redacted})
    return out


def redact_report(report: Report, *, paths: bool = False) -> Report:
    """``report`` with the texts it carries beside the caller's input redacted (see the module docstring), after
    prompt markup is taken out of its reasons, fixes and quotes (:func:`halluscope.text.markup.clean_report`); the
    same object when nothing changes."""
    from halluscope.text.markup import clean_report

    report = clean_report(report)

    def calls(items: list[Any]) -> list[Any]:
        out = []
        for call in items:
            update = {
                "reply": redact(call.reply, paths=paths),
                "model": redact(call.model, paths=paths),
                "messages": _messages(call.messages, paths),
            }
            changed = any(getattr(call, k) != v for k, v in update.items())
            out.append(call.model_copy(update=update) if changed else call)
        return out

    verdicts = []
    for v in report.verdicts:
        redacted = {"reason": redact(v.reason, paths=paths), "calls": calls(v.calls)}
        changed = redacted["reason"] != v.reason or any(a is not b for a, b in zip(redacted["calls"], v.calls))
        verdicts.append(v.model_copy(update=redacted) if changed else v)
    findings = [
        f if (d := redact(f.description, paths=paths)) == f.description else f.model_copy(update={"description": d})
        for f in report.findings
    ]
    update: dict[str, Any] = {
        "unscored_reason": _text(report.unscored_reason, paths),
        "model": _text(report.model, paths),
        "details": _walk(report.details, paths),
        "calls": calls(report.calls),
        "verdicts": verdicts,
        "findings": findings,
    }
    unchanged = (
        update["unscored_reason"] == report.unscored_reason
        and update["model"] == report.model
        and update["details"] == report.details
        and all(a is b for a, b in zip(update["calls"], report.calls))
        and all(a is b for a, b in zip(verdicts, report.verdicts))
        and all(a is b for a, b in zip(findings, report.findings))
    )
    return report if unchanged else report.model_copy(update=update)
