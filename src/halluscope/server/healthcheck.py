"""``python -m halluscope.server.healthcheck``: exit 0 when the local service answers ``GET /health`` with 200,
else 1 (the container's HEALTHCHECK; no curl needed in the image).

The port is the one the running ``halluscope serve`` was given: read from its command line (``--port 9000`` or
``--port=9000``, process 1 or a child of it, found in ``/proc``; a container started with ``... halluscope serve --port
9000`` is then checked on 9000), else ``HALLUSCOPE_SERVER_PORT`` (what ``serve`` reads too), else 8080."""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

DEFAULT_PORT = 8080


def _serve_args(argv: list[str]) -> list[str] | None:
    """The arguments after ``serve`` when ``argv`` runs ``halluscope serve`` (or ``python -m halluscope.server``)."""
    for i, arg in enumerate(argv):
        name = os.path.basename(arg)
        if name == "halluscope" and i + 1 < len(argv) and argv[i + 1] == "serve":
            return argv[i + 2 :]
        if arg == "-m" and i + 1 < len(argv) and argv[i + 1] in ("halluscope.server", "halluscope"):
            rest = argv[i + 2 :]
            if argv[i + 1] == "halluscope":
                return rest[1:] if rest[:1] == ["serve"] else None
            return rest
    return None


def port_from_args(args: list[str]) -> int | None:
    """The ``--port`` of ``serve``'s arguments (the last one given wins, as with click), else None."""
    port: int | None = None
    for i, arg in enumerate(args):
        value = None
        if arg == "--port" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--port="):
            value = arg.split("=", 1)[1]
        if value is not None and value.isdigit():
            port = int(value)
    return port


def _parent(root: Path, pid: int) -> int | None:
    try:
        stat = (root / str(pid) / "stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def serve_port_from_proc(proc_root: str | os.PathLike[str] = "/proc") -> int | None:
    """The ``--port`` of the container's ``halluscope serve``: process 1 (the image's CMD) or a child of it (under
    ``docker run --init``), found under ``proc_root``; None when neither runs ``serve``."""
    root = Path(proc_root)
    try:
        pids = sorted(int(p.name) for p in root.iterdir() if p.name.isdigit())
    except OSError:
        return None
    for pid in pids:
        if pid != 1 and _parent(root, pid) != 1:
            continue
        try:
            raw = (root / str(pid) / "cmdline").read_bytes()
        except OSError:
            continue
        args = _serve_args([a.decode("utf-8", "replace") for a in raw.split(b"\0") if a])
        port = port_from_args(args) if args is not None else None
        if port is not None:
            return port
    return None


def health_url(environ: dict[str, str] | None = None, proc_root: str | os.PathLike[str] = "/proc") -> str:
    env = os.environ if environ is None else environ
    port = serve_port_from_proc(proc_root) or int(env.get("HALLUSCOPE_SERVER_PORT") or DEFAULT_PORT)
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
