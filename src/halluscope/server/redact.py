"""Server filesystem paths never reach a caller: every error message the service sends passes through
:func:`redact_paths` (a missing dataset folder, a model file that would not load, a prompt file...)."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

__all__ = ["REDACTED", "redact_paths", "register_root"]

REDACTED = "<server path>"

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
    return _ABSOLUTE.sub(REDACTED, text)
