"""An endpoint that refuses the connection ends the check at once: one line naming the URL, exit 3, no retries of
the refused connection (per sentence or otherwise), well under 2 s."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx
from typer.testing import CliRunner

from halluscope.cli.main import app
from halluscope.config import Config
from halluscope.methods import get_method

REPO = Path(__file__).resolve().parents[1]
SOURCE = (REPO / "examples" / "source.txt").read_text()
SUMMARY = (REPO / "examples" / "summary.txt").read_text()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_refused_connection_ends_the_check_with_one_line_naming_the_url(tmp_path, monkeypatch) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    attempts: list[str] = []
    real_stream = httpx.AsyncClient.stream

    def counted(self: httpx.AsyncClient, *args: object, **kwargs: object) -> object:
        attempts.append(str(self.base_url))
        return real_stream(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(httpx.AsyncClient, "stream", counted)
    (tmp_path / "s.txt").write_text(SOURCE)
    (tmp_path / "t.txt").write_text(SUMMARY)
    started = time.perf_counter()
    result = CliRunner().invoke(
        app,
        ["check", "-s", str(tmp_path / "s.txt"), "-t", str(tmp_path / "t.txt"), "--base-url", url, "--model", "m"]
        + ["--no-cache", "--concurrency", "1", "-o", "order=reason_first"],
    )
    elapsed = time.perf_counter() - started
    assert result.exit_code == 3, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines == [f"error: could not score: cannot connect to the model's endpoint at {url} (connection refused)"]
    assert "alpha" not in result.stderr and "ConnectError" not in result.stderr
    assert len(attempts) == 1  # three sentences, one attempt: the first refusal ends the check
    assert elapsed < 2.0


def test_the_report_is_unscored_with_that_reason_in_python() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    method = get_method("dcr", config=Config(model="m", base_url=url, cache=False))
    report = method.check(SOURCE, SUMMARY)
    assert report.score is None and report.verdicts == [] and report.label is None
    assert report.unscored_reason == f"cannot connect to the model's endpoint at {url} (connection refused)"
