"""The service imports the built-in methods and the libraries their first check would import lazily before it
reports ready (so a broken install fails the start, and the memory it grows by while answering is what its
requests cost, not a one-time import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")
pytest.importorskip("prometheus_client", reason="server extra not installed: pip install 'halluscope[server]'")

from halluscope.config import Config
from halluscope.server import ServerSettings, create_app, warmup
from halluscope.server.service import Service

SRC = Path(__file__).resolve().parents[1] / "src"

# lazily imported by a first check (the CLI keeps them lazy), imported at the service's start
FIRST_CHECK_MODULES = [
    "bm25s",
    "scipy.sparse",
    "pysbd",
    "httpx",
    "halluscope.llm.openai_compat",
    "halluscope.retrieval",
    "halluscope.methods.probe",
    "halluscope.methods.geval",
    "halluscope.methods.dcr",
    "halluscope.methods.factscore",
]

_IN_A_FRESH_PROCESS = """
import json, sys
from pathlib import Path
from halluscope.config import Config
from halluscope.server import ServerSettings
from halluscope.server.service import Service
watched = json.loads(sys.argv[1])
service = Service(Config(cache=False), ServerSettings(jobs_db=Path(sys.argv[2])))
built = [m for m in watched if m in sys.modules]
service.ensure_started()
started = [m for m in watched if m in sys.modules]
service.stop()
print(json.dumps({"built": built, "started": started}))
"""


def test_the_service_imports_what_a_first_check_would_before_it_starts(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", _IN_A_FRESH_PROCESS, json.dumps(FIRST_CHECK_MODULES), str(tmp_path / "jobs.sqlite")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert "bm25s" not in seen["built"] and "halluscope.methods.probe" not in seen["built"]  # lazy until started
    assert seen["started"] == FIRST_CHECK_MODULES


def test_a_broken_install_fails_the_start_and_the_service_never_reports_ready(tmp_path, monkeypatch) -> None:
    from fastapi.testclient import TestClient

    broken = (*warmup.FIRST_USE_MODULES, ("halluscope_no_such_module", "a core dependency missing"))
    monkeypatch.setattr(warmup, "FIRST_USE_MODULES", broken)
    service = Service(Config(cache=False), ServerSettings(jobs_db=tmp_path / "jobs.sqlite"))
    with pytest.raises(ModuleNotFoundError, match="halluscope_no_such_module"):
        service.ensure_started()
    assert not service.started and not (tmp_path / "jobs.sqlite").exists()  # no store, no workers

    app = create_app(Config(cache=False), ServerSettings(jobs_db=tmp_path / "jobs2.sqlite"))
    with pytest.raises(ModuleNotFoundError), TestClient(app) as client:  # the lifespan's start-up fails
        client.get("/health")  # never reached
