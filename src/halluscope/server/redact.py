"""Server filesystem paths and credentials never reach a caller: every error message the service sends passes
through :func:`redact_paths` (a missing dataset folder, a model file that would not load, a prompt file, an
upstream URL with its key...), and every report through :func:`redact_report` with ``paths=True``. Both are the
one redactor of :mod:`halluscope.text.redact`."""

from __future__ import annotations

from halluscope.text.redact import REDACTED, redact, redact_report, register_root

__all__ = ["REDACTED", "redact_paths", "redact_report", "register_root"]


def redact_paths(text: str) -> str:
    """``text`` as the service may send it: every server path replaced by ``<server path>`` and every credential
    masked (:func:`halluscope.text.redact.redact` with ``paths=True``)."""
    return redact(text, paths=True)
