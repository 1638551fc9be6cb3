"""The Dockerfile of `halluscope serve`, exercised without docker (no daemon and no registry here): its final
stage runs as a non-root user, its environment variables are all read by `serve`, its CMD parses with the CLI
into the expected settings, its HEALTHCHECK command reports a live /health as healthy and anything else as
not; every `serve` flag has an environment variable."""

from __future__ import annotations

import http.server
import json
import re
import shlex
import threading
import tomllib
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from halluscope.cli.main import app

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#")))
    out = []
    for line in text.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    steps = instructions(DOCKERFILE.read_text(encoding="utf-8"))
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def stage_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in final_stage():
        if word == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def serve_click_command():
    group = typer.main.get_command(app)
    return group.commands["serve"]  # type: ignore[attr-defined]


def test_runs_as_a_non_root_user():
    users = [rest for word, rest in final_stage() if word == "USER"]
    assert users and users[-1] not in ("root", "0")
    steps = final_stage()
    assert [w for w, _ in steps].index("USER") < [w for w, _ in steps].index("CMD")


def test_copied_files_and_extras_exist():
    steps = instructions(DOCKERFILE.read_text(encoding="utf-8"))
    for word, rest in steps:
        if word == "COPY" and not rest.startswith("--from"):
            for name in rest.split()[:-1]:
                assert (REPO / name).exists(), name
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    defaults = re.findall(r"ARG EXTRAS=(\S+)", DOCKERFILE.read_text())
    assert defaults and all(e in extras for d in defaults for e in d.split(","))
    assert "embedded" in extras  # the documented --build-arg EXTRAS=server,embedded


def test_every_halluscope_variable_the_image_sets_is_read_by_serve():
    envvars = {p.envvar for p in serve_click_command().params if p.envvar}
    set_here = {k for k in stage_env() if k.startswith("HALLUSCOPE_")}
    assert set_here and set_here <= envvars, set_here - envvars


def test_every_visible_serve_flag_has_an_environment_variable():
    # -v/-q are shortcuts for --log-level, whose variable a container sets instead
    shortcuts = {"verbose", "quiet"}
    params = serve_click_command().params
    missing = [p.name for p in params if not getattr(p, "hidden", False) and not p.envvar and p.name not in shortcuts]
    assert missing == []
    assert any(p.name == "log_level" and p.envvar for p in params)


@pytest.fixture
def captured(monkeypatch):
    """Run `serve` up to the point where it would start uvicorn, and keep what it would have served."""
    import uvicorn

    import halluscope.server as server

    seen: dict = {}

    def fake_create_app(config, settings):
        seen.update(config=config, settings=settings)
        return "app"

    def fake_run(app_obj, **kwargs):
        seen.update(app=app_obj, **kwargs)

    monkeypatch.setattr(server, "create_app", fake_create_app)
    monkeypatch.setattr(uvicorn, "run", fake_run)
    monkeypatch.setattr("halluscope.cli.serve._check_writable", lambda folder: seen.update(checked=folder))
    return seen


def _cmd() -> list[str]:
    (cmd,) = [json.loads(rest) for word, rest in final_stage() if word == "CMD"]
    assert cmd[0] == "halluscope"
    return cmd[1:]


def test_cmd_parses_with_the_cli_and_takes_its_settings_from_the_environment(captured, monkeypatch):
    for key in list(__import__("os").environ):
        if key.startswith("HALLUSCOPE_"):
            monkeypatch.delenv(key)
    env = {
        **stage_env(),
        "HALLUSCOPE_SERVER_TOKEN": "secret",
        "HALLUSCOPE_MODEL": "gpt-4o-mini",
        "HALLUSCOPE_BASE_URL": "http://models.internal/v1",
        "HALLUSCOPE_SERVER_MAX_IN_FLIGHT": "3",
        "HALLUSCOPE_SERVER_CHECK_TIMEOUT": "12.5",
        "HALLUSCOPE_SERVER_METRICS_PUBLIC": "true",
        "HALLUSCOPE_MAX_CONCURRENCY": "5",
    }
    result = CliRunner().invoke(app, _cmd(), env=env)
    assert result.exit_code == 0, result.output
    assert captured["host"] == "0.0.0.0" and captured["port"] == 8080
    settings, config = captured["settings"], captured["config"]
    assert settings.token == "secret" and settings.jobs_db == Path("/data/jobs.sqlite")
    assert settings.max_in_flight == 3 and settings.timeout_s == 12.5 and settings.metrics_public is True
    assert config.model == "gpt-4o-mini" and config.base_url == "http://models.internal/v1"
    assert config.max_concurrency == 5


def test_cmd_refuses_to_listen_without_a_token(captured):
    result = CliRunner().invoke(app, _cmd(), env={**stage_env(), "HALLUSCOPE_SERVER_TOKEN": ""})
    assert result.exit_code == 2 and "refusing" in result.output and "app" not in captured


def test_flags_win_over_variables_and_old_timeout_spelling_still_works(captured):
    env = {"HALLUSCOPE_SERVER_PORT": "9000", "HALLUSCOPE_SERVER_CHECK_TIMEOUT": "7"}
    assert CliRunner().invoke(app, ["serve", "--port", "9100", "--timeout", "9"], env=env).exit_code == 0
    assert captured["port"] == 9100 and captured["settings"].timeout_s == 9.0  # --timeout = --check-timeout
    clash = CliRunner().invoke(app, ["serve", "--check-timeout", "5", "--timeout", "9"])
    assert clash.exit_code == 2 and "disagree" in clash.output


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):  # noqa: N802
        self.send_response(self.status if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("status, healthy", [(200, True), (503, False)])
def test_healthcheck_command(status, healthy, monkeypatch):
    from halluscope.server import healthcheck

    handler = type("H", (_Health,), {"status": status})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("HALLUSCOPE_SERVER_PORT", str(server.server_address[1]))
        monkeypatch.setattr(healthcheck, "serve_port_from_proc", lambda *a: None)  # no serve process here
        assert healthcheck.main() == (0 if healthy else 1)
    finally:
        server.shutdown()
        server.server_close()
    # the port is closed now: unhealthy
    assert healthcheck.main() == 1


def test_healthcheck_is_the_images_healthcheck():
    (line,) = [rest for word, rest in final_stage() if word == "HEALTHCHECK"]
    cmd = json.loads(line.split("CMD", 1)[1].strip())
    assert cmd == ["python", "-m", "halluscope.server.healthcheck"]


def test_image_command_serves_health_with_the_image_environment(tmp_path):
    """The image's CMD, run as a process with the image's environment (paths moved to a temporary folder):
    the HEALTHCHECK command turns healthy once it listens, and the process stops cleanly."""
    pytest.importorskip("uvicorn", reason="needs the server extra")
    pytest.importorskip("fastapi", reason="needs the server extra")
    import os
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HALLUSCOPE_")}
    env.update(stage_env())
    env.update(
        {
            "HALLUSCOPE_SERVER_PORT": str(port),
            "HALLUSCOPE_SERVER_JOBS_DB": str(tmp_path / "jobs.sqlite"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "HALLUSCOPE_SERVER_TOKEN": "secret",
            "HALLUSCOPE_MODEL": "remote-model",
            "HALLUSCOPE_BASE_URL": "http://127.0.0.1:9/v1",
            "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
        }
    )
    cmd = [sys.executable, "-m", "halluscope", *_cmd()]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check = [sys.executable, "-m", "halluscope.server.healthcheck"]
    try:
        deadline = time.monotonic() + 60
        healthy = False
        while time.monotonic() < deadline and proc.poll() is None:
            if subprocess.run(check, env=env, capture_output=True).returncode == 0:
                healthy = True
                break
            time.sleep(0.5)
        assert healthy, f"never healthy; exit={proc.poll()}"
    finally:
        proc.terminate()
        output = proc.communicate(timeout=30)[0]
    # a graceful stop: uvicorn finishes its shutdown, then re-raises SIGTERM (exit -15) or exits 0
    # 143 = 128 + SIGTERM: serve exits through Python's exit handlers with the status the signal would give
    assert proc.returncode in (0, -15, 143) and "Application shutdown complete" in output, output[-2000:]
    assert '"route": "/health"' in output and '"status": 200' in output
    assert subprocess.run(check, env=env, capture_output=True).returncode == 1  # stopped: unhealthy


# ------------------------------------------------------------------------------------------ the image's pieces


def _fake_proc(root: Path, processes: dict[int, tuple[int, list[str]]]) -> Path:
    for pid, (ppid, argv) in processes.items():
        d = root / str(pid)
        d.mkdir(parents=True)
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (d / "stat").write_text(f"{pid} ({argv[0][:15]}) S {ppid} 1 1 0")
    return root


@pytest.mark.parametrize(
    "processes, port",
    [
        ({1: (0, ["/usr/local/bin/python", "/usr/local/bin/halluscope", "serve", "--port", "9000"])}, 9000),
        ({1: (0, ["halluscope", "serve", "--port=9100"])}, 9100),
        (
            {
                1: (0, ["/sbin/docker-init", "--", "halluscope", "serve"]),
                7: (
                    1,
                    ["/usr/local/bin/python", "/usr/local/bin/halluscope", "serve", "--port", "9200", "--workers", "2"],
                ),
            },
            9200,
        ),  # docker run --init: serve is a child of process 1
        ({1: (0, ["python", "-m", "halluscope.server", "--port", "9300"])}, 9300),
        ({1: (0, ["halluscope", "serve"])}, None),  # no --port: the variable, else 8080
        ({1: (0, ["/sbin/init"]), 40: (12, ["halluscope", "serve", "--port", "9400"])}, None),  # not the container's
    ],
)
def test_the_healthcheck_follows_the_port_serve_was_given(tmp_path, processes, port):
    from halluscope.server import healthcheck

    root = _fake_proc(tmp_path / "proc", processes)
    assert healthcheck.serve_port_from_proc(root) == port
    expected = port or 8123
    assert (
        healthcheck.health_url({"HALLUSCOPE_SERVER_PORT": "8123"}, proc_root=root)
        == f"http://127.0.0.1:{expected}/health"
    )


def test_the_runtime_image_has_the_openmp_runtime_and_a_pinned_base():
    text = DOCKERFILE.read_text(encoding="utf-8")
    runs = " ".join(rest for word, rest in final_stage() if word == "RUN")
    assert "libgomp1" in runs  # llama.cpp's embedded model links it
    (base,) = re.findall(r"ARG PYTHON_IMAGE=(\S+)", text)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", base), base


def test_serve_refuses_a_jobs_folder_it_cannot_write(tmp_path, monkeypatch):
    import os

    import uvicorn

    if hasattr(os, "getuid") and os.getuid() == 0:
        locked = tmp_path / "not-a-folder"
        locked.write_text("a file where the folder should be")
        jobs = locked / "jobs.sqlite"
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        jobs = locked / "jobs.sqlite"
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: pytest.fail("served despite an unwritable folder"))
    result = CliRunner().invoke(app, ["serve", "--jobs-db", str(jobs)])
    assert result.exit_code == 2 and "not writable" in result.output and "--user" in result.output


def _docker_available() -> str | None:
    """None when a docker daemon answers here, else why not."""
    import shutil
    import subprocess

    if shutil.which("docker") is None:
        return "no docker client on this machine"
    try:
        info = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker info failed: {exc}"
    if info.returncode != 0:
        return "no docker daemon answers here: " + (info.stderr.strip().splitlines() or ["docker info failed"])[-1]
    return None


def test_the_image_builds_and_reports_healthy_on_another_port(tmp_path):
    """Where a docker daemon (and the base image or a registry) is available: build the image, run it with
    ``serve --port 9000`` and a bind-mounted /data owned by the caller (--user), and wait for the HEALTHCHECK
    to report healthy. Skipped, with the reason, where docker is not available."""
    import subprocess
    import time

    why = _docker_available()
    if why is not None:
        pytest.skip(why)
    tag = "halluscope-test:latest"
    build = subprocess.run(["docker", "build", "-t", tag, str(REPO)], capture_output=True, text=True, timeout=3600)
    assert build.returncode == 0, build.stderr[-3000:]
    data = tmp_path / "data"
    data.mkdir()
    import os

    name = f"halluscope-test-{os.getpid()}"
    run = subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--name",
            name,
            "--user",
            f"{os.getuid()}:{os.getgid()}",
            "-v",
            f"{data}:/data",
            "-e",
            "HALLUSCOPE_SERVER_TOKEN=t",
            "-e",
            "HALLUSCOPE_MODEL=remote",
            "-e",
            "HALLUSCOPE_BASE_URL=http://127.0.0.1:9/v1",
            "--health-interval",
            "2s",
            tag,
            "halluscope",
            "serve",
            "--port",
            "9000",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    try:
        status = ""
        for _ in range(90):
            status = subprocess.run(
                ["docker", "inspect", "--format", "{{.State.Health.Status}}", name],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
            if status in ("healthy", "unhealthy"):
                break
            time.sleep(2)
        assert status == "healthy", subprocess.run(["docker", "logs", name], capture_output=True, text=True).stderr
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
