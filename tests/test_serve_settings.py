"""The service's settings are declared once (``ServerSettings``): ``halluscope serve`` reads each flag's default
from it, and every setting is either a flag or named here as not one. Fails when the two drift."""

from __future__ import annotations

import dataclasses
import os

import typer
from typer.testing import CliRunner

from halluscope.cli.main import app
from halluscope.server.settings import MiB, ServerSettings

# setting -> the serve flag's parameter that sets it
FLAG_OF = {
    "token": "token",
    "max_chars": "max_chars",
    "max_calls": "max_calls",
    "timeout_s": "timeout",
    "default_method": "method",
    "max_body_bytes": "max_body_mb",
    "body_timeout_s": "body_timeout",
    "header_timeout_s": "header_timeout",
    "max_in_flight": "max_in_flight",
    "max_queue": "max_queue",
    "queue_timeout_s": "queue_timeout",
    "max_open_requests": "max_open_requests",
    "max_batch_items": "max_batch_items",
    "batch_concurrency": "batch_concurrency",
    "workers": "workers",
    "cpu_workers": "cpu_workers",
    "jobs_db": "jobs_db",
    "jobs_url": "jobs_url",
    "job_lease_s": "job_lease",
    "max_jobs": "max_jobs",
    "job_concurrency": "job_concurrency",
    "data_dir": "data_dir",
    "datasets_dir": "datasets_dir",
    "allowed_models": "allow_model",
    "metrics_public": "metrics_public",
}
# settings with no flag (set in Python, or fixed for the CLI's service)
NOT_FLAGS = {
    "retry_after_s",
    "method_cache_size",
    "max_job_items",
    "job_item_attempts",
    "max_running_jobs",
    "shutdown_grace_s",
}


def _serve_params() -> dict[str, object]:
    command = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    return {p.name: p.default for p in command.params}


def test_every_setting_is_a_flag_or_named_as_none():
    fields = {f.name for f in dataclasses.fields(ServerSettings)}
    assert set(FLAG_OF) | NOT_FLAGS == fields and not set(FLAG_OF) & NOT_FLAGS
    params = _serve_params()
    assert set(FLAG_OF.values()) <= set(params)


def test_each_flags_default_is_the_settings_default():
    params, defaults = _serve_params(), ServerSettings()
    converted = {"max_body_bytes": lambda mb: int(mb * MiB), "allowed_models": lambda v: tuple(v or ())}
    unset_means_default = {"timeout_s", "cpu_workers"}  # None on the command line: the setting's default
    for field, param in FLAG_OF.items():
        flag_default = params[param]
        if field in unset_means_default:
            assert flag_default is None, field
            continue
        assert converted.get(field, lambda v: v)(flag_default) == getattr(defaults, field), field


def test_serve_without_flags_serves_the_default_settings(monkeypatch, tmp_path):
    import uvicorn

    import halluscope.server as server

    for name in [n for n in os.environ if n.startswith("HALLUSCOPE_SERVER_")]:
        monkeypatch.delenv(name)
    seen: dict[str, ServerSettings] = {}
    monkeypatch.setattr(server, "create_app", lambda config, settings: seen.update(settings=settings))
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)
    jobs_db = tmp_path / "jobs.sqlite"
    result = CliRunner().invoke(app, ["serve", "--jobs-db", str(jobs_db)])
    assert result.exit_code == 0, result.output
    assert seen["settings"] == ServerSettings(jobs_db=jobs_db)
