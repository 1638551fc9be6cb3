"""The processes of a scenario: a free port, the stub endpoint and the server started on 127.0.0.1 and stopped by
process id, and their memory and open files read from ``/proc``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

STUB_SERVER = Path(__file__).resolve().parents[1] / "stub_server.py"  # run as a script
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _proc_status(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def rss_mb(pid: int) -> float:
    """Resident memory now, in MB."""
    return _proc_status(pid, "VmRSS") / 1024


def peak_rss_mb(pid: int) -> float:
    """Highest resident memory since the process started, in MB."""
    return _proc_status(pid, "VmHWM") / 1024


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def wait_ready(self, path: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"process exited with {self.popen.returncode}: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + path, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"not ready after {timeout_s}s: {self.log.read_text()[-2000:]}")

    def kill9(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.popen.wait(10)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.kill9()

    def __enter__(self) -> Proc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HALLUSCOPE_", "OPENAI_"))}
    env["XDG_CACHE_HOME"] = str(home / "cache")  # LLM cache and jobs database live here
    return env


def start_stub(home: Path, latency_ms: float = 20.0, hold_after: int | None = None) -> Proc:
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = home / f"stub-{port}.log"
    cmd = [sys.executable, str(STUB_SERVER), "--port", str(port), "--latency-ms", str(latency_ms)]
    if hold_after is not None:
        cmd += ["--hold-after", str(hold_after)]
    proc = Proc(subprocess.Popen(cmd, env=_env(home), stdout=log.open("wb"), stderr=subprocess.STDOUT), port, log)
    proc.wait_ready("/stats")
    return proc


def start_server(
    home: Path,
    *args: str,
    stub: Proc | None = None,
    token: str | None = None,
    port: int | None = None,
    env: dict[str, str] | None = None,
) -> Proc:
    """``python -m halluscope.server`` on 127.0.0.1 with its cache and jobs under ``home`` (``env``: variables
    added to its environment, e.g. ``HALLUSCOPE_CACHE_URL``)."""
    home.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log = home / f"server-{port}-{int(time.time() * 1000)}.log"
    cmd = [sys.executable, "-m", "halluscope.server", "--port", str(port), "--log-level", "warning", *args]
    if stub is not None:
        cmd += ["--base-url", f"{stub.url}/v1", "--model", "stub"]
    if token is not None:
        cmd += ["--token", token]
    proc = Proc(
        subprocess.Popen(cmd, env={**_env(home), **(env or {})}, stdout=log.open("wb"), stderr=subprocess.STDOUT),
        port,
        log,
    )
    proc.wait_ready("/health")
    return proc
