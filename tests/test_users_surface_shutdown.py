"""Stopping the server (SIGTERM, as a container runtime does; SIGINT, as Ctrl-C does) after checks ran in its worker
processes prints no "leaked semaphore objects" warning: the workers' semaphores are released at exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import free_loopback_port

pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_stopping_the_server_prints_no_leaked_semaphore_warning(tmp_path, stop: signal.Signals) -> None:
    port = free_loopback_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    args = ["serve", "--port", str(port), "--log-format", "text", "--cpu-workers", "2"]
    server = subprocess.Popen(
        [sys.executable, "-m", "halluscope.cli.main", *args, "--jobs-db", str(tmp_path / "jobs.sqlite")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        else:
            pytest.fail("the server did not start in 120 s")
        for method in ("gate", "rouge"):  # both run in the worker processes
            body = {"source": "The cat sat on the mat.", "target": "The cat sat.", "method": method}
            assert httpx.post(f"{url}/check", json=body, timeout=60).status_code == 200
        server.send_signal(stop)
        _, stderr = server.communicate(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert "leaked semaphore" not in stderr and "resource_tracker" not in stderr, stderr[-2000:]
    assert server.returncode in (0, 128 + stop, -stop)
