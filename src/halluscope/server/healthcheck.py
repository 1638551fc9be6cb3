"""``python -m halluscope.server.healthcheck``: exit 0 when the local service answers ``GET /health`` with 200,
else 1 (the container's HEALTHCHECK; no curl needed in the image). Reads the port from
``HALLUSCOPE_SERVER_PORT`` (default 8080), like ``halluscope serve``."""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

DEFAULT_PORT = 8080


def health_url(environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    port = int(env.get("HALLUSCOPE_SERVER_PORT") or DEFAULT_PORT)
    return f"http://127.0.0.1:{port}/health"


def probe(url: str, timeout_s: float = 4.0) -> tuple[bool, str]:
    """(healthy, what was seen)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (loopback URL we built)
            return response.status == 200, f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return False, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return False, f"unreachable: {exc}"


def main() -> int:
    url = health_url()
    ok, seen = probe(url)
    if not ok:
        print(f"unhealthy: {url}: {seen}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
