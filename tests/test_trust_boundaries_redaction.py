"""Trust boundaries: no secret leaves in a report.

A stub OpenAI-compatible endpoint on loopback fails with an error text that names a server file path and an upstream
URL with its credentials, reached through a base URL that carries a user and password; another answers with a reply
that quotes a key and a path. The CLI's JSON report masks every credential (the path is the user's own machine's and
stays); the service's report, as JSON and as the web report, masks the credentials and the path. The redactor itself
is checked on the forms it must catch and on text it must leave alone.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from halluscope.llm import LLM
from halluscope.llm.base import LLMError
from halluscope.llm.openai_compat import OpenAICompatibleModel
from halluscope.records import LLMCall, Report, Verdict
from halluscope.text.redact import MASK, REDACTED, redact, redact_report, secret_name
from tests.test_backends_openai import ScriptedServer

SOURCE = "The ferry starts in May. The city pays a third of the cost."
TARGET = "The ferry starts in May."
URL_PASSWORD = "hunter2-url-pw"
API_KEY = "sk-user-secret-abcdef123456"
UPSTREAM_KEY = "upstream-key-123"
UPSTREAM = f"http://admin:upstream-pw@10.9.8.7:9000/v1/chat?api-key={UPSTREAM_KEY}&model=m"
SERVER_PATH = "/srv/models/private/judge-7b.gguf"
LEAKED = "leaked-key-999"
SECRETS = (URL_PASSWORD, API_KEY, "upstream-pw", UPSTREAM_KEY, LEAKED, "admin:")


def failing_endpoint() -> ScriptedServer:
    """Every call: 503 with an error text naming a model file of the server and an upstream URL with its key."""
    error = {"error": {"message": f"cannot load model '{SERVER_PATH}': upstream {UPSTREAM} refused"}}
    return ScriptedServer([(503, error, {})])


def leaky_endpoint() -> ScriptedServer:
    """Every call answers no, quoting a key and a server path (kept on the verdict as the raw reply)."""
    reply = f"No. Config: api_key={LEAKED}, Authorization: Bearer {API_KEY}, file {SERVER_PATH}"
    body = {"choices": [{"message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}]}
    return ScriptedServer([(200, body, {})])


def with_password(url: str) -> str:
    return url.replace("http://", f"http://admin:{URL_PASSWORD}@")


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked: {text[:2000]}"


@pytest.fixture(autouse=True)
def here(tmp_path, monkeypatch):
    """No config file and no HALLUSCOPE_*/OPENAI_* setting from the machine running the tests."""
    monkeypatch.chdir(tmp_path)
    for key in [k for k in __import__("os").environ if k.startswith(("HALLUSCOPE_", "OPENAI_"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HALLUSCOPE_MAX_RETRIES", "0")
    return tmp_path


def run_cli(base_url: str) -> tuple[dict, str]:
    from pathlib import Path

    from halluscope.cli.main import app

    Path("source.txt").write_text(SOURCE)
    Path("target.txt").write_text(TARGET)
    result = CliRunner().invoke(
        app,
        ["check", "-s", "source.txt", "-t", "target.txt", "--model", "stub", "--base-url", base_url]
        + ["--api-key", API_KEY, "--json", "--no-cache"],
    )
    out = result.output
    assert "{" in out, out
    return json.loads(out[out.index("{") : out.rindex("}") + 1]), out


def test_cli_json_masks_the_credentials_of_an_endpoint_error() -> None:
    with failing_endpoint() as server:
        report, out = run_cli(with_password(server.url))
    assert server.requests  # the endpoint was called (and failed)
    reasons = [v["reason"] for v in report["verdicts"]] + [report.get("unscored_reason") or ""]
    assert any("503" in r for r in reasons), reasons
    assert_no_secret(out)
    assert any(f"http://{MASK}@127.0.0.1" in r for r in reasons) and any("api-key=***" in r for r in reasons)
    assert any(SERVER_PATH in r for r in reasons)  # the CLI masks credentials only: a path on the user's machine stays


def test_cli_json_masks_a_key_quoted_in_a_raw_reply() -> None:
    with leaky_endpoint() as server:
        report, out = run_cli(server.url)
    (verdict,) = report["verdicts"]
    assert verdict["label"] in ("unsupported", "contradicted")
    replies = [c["reply"] for c in report["calls"]] + [c["reply"] for c in verdict["calls"]]
    assert replies and all(f"api_key={MASK}" in r and f"Bearer {MASK}" in r for r in replies)
    assert_no_secret(out)


def _service(tmp_path, base_url: str):
    pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")
    pytest.importorskip("prometheus_client", reason="server extra not installed: pip install 'halluscope[server]'")
    from fastapi.testclient import TestClient

    from halluscope.config import Config
    from halluscope.server import ServerSettings, create_app

    llm = LLM(OpenAICompatibleModel("stub", base_url, API_KEY, max_retries=0))
    app = create_app(Config(cache=False), ServerSettings(jobs_db=tmp_path / "jobs.sqlite", cpu_workers=0), llm=llm)
    return TestClient(app)


@pytest.mark.parametrize("fmt", ["json", "html"])
def test_service_report_masks_credentials_and_server_paths(tmp_path, fmt) -> None:
    with failing_endpoint() as server, _service(tmp_path, with_password(server.url)) as client:
        r = client.post(f"/check?format={fmt}", json={"source": SOURCE, "target": TARGET})
    assert r.status_code == 200, r.text
    assert server.requests
    assert_no_secret(r.text)
    assert SERVER_PATH not in r.text and "/srv/models" not in r.text
    if fmt == "json":
        report = Report.model_validate(r.json())
        reasons = " ".join(v.reason for v in report.verdicts) + (report.unscored_reason or "")
        assert "503" in reasons and REDACTED in reasons and "api-key=***" in reasons


def test_service_report_masks_a_raw_reply(tmp_path) -> None:
    with leaky_endpoint() as server, _service(tmp_path, server.url) as client:
        r = client.post("/check", json={"source": SOURCE, "target": TARGET})
    assert r.status_code == 200, r.text
    assert_no_secret(r.text)
    assert SERVER_PATH not in r.text
    report = Report.model_validate(r.json())
    assert all(REDACTED in c.reply for v in report.verdicts for c in v.calls)


# -- the redactor ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("at http://admin:pw@host:8000/v1", f"at http://{MASK}@host:8000/v1"),
        ("https://user@host/x", f"https://{MASK}@host/x"),
        ("GET /v1?api-key=abc&model=m", f"GET /v1?api-key={MASK}&model=m"),
        (
            "?api_key=abc&token=t&secret=s&password=p&sig=x",
            f"?api_key={MASK}&token={MASK}&secret={MASK}&password={MASK}&sig={MASK}",
        ),
        ("X-Amz-Signature=abc&X-Amz-Credential=AK/1", f"X-Amz-Signature={MASK}&X-Amz-Credential={MASK}"),
        ('{"api_key": "abc", "model": "m"}', f'{{"api_key": "{MASK}", "model": "m"}}'),
        ("Authorization: Bearer abc.def-123", f"Authorization: Bearer {MASK}"),
        ("authorization: Basic dXNlcjpwYXNz", f"authorization: Basic {MASK}"),
        ("key sk-proj-ABCDEFGH12345678 used", f"key {MASK} used"),
        ("hf_abcdefghijklmnopqrstuv and AKIAABCDEFGHIJKLMNOP", f"{MASK} and {MASK}"),
    ],
)
def test_the_redactor_masks_credentials(text, expected) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "see http://127.0.0.1:8080/v1/chat/completions",
        "P(yes) = 0.917 at the answer token disagrees with the answer no",
        "design=3 monkey=4 author=me max_tokens=2 explain_below=0.5",
        "the bearer of the news; basic facts; a token of thanks",
        "no token log-probabilities were returned",
    ],
)
def test_the_redactor_leaves_ordinary_text_alone(text) -> None:
    assert redact(text) == text


def test_paths_are_redacted_only_when_asked() -> None:
    text = f"cannot load '{SERVER_PATH}'"
    assert redact(text) == text
    assert redact(text, paths=True) == f"cannot load '{REDACTED}'"


def test_secret_names() -> None:
    assert all(secret_name(n) for n in ["api-key", "apiKey", "access_token", "sessionId", "X-Amz-Credential", "pwd"])
    assert not any(
        secret_name(n) for n in ["author", "monkey", "design", "model", "max_tokens", "pass_fraction", "passage"]
    )


def test_an_llm_error_message_is_masked_when_it_is_made() -> None:
    assert (
        str(LLMError(f"m at {UPSTREAM}: HTTP 500"))
        == f"m at http://{MASK}@10.9.8.7:9000/v1/chat?api-key={MASK}&model=m: HTTP 500"
    )


def test_redact_report_keeps_the_callers_text_and_the_same_object_when_clean() -> None:
    from halluscope.records import Claim

    claim = Claim(text="the password=abc is in the target")  # the caller's own text is not touched
    call = LLMCall(model="m", messages=[{"role": "user", "content": "token=abc"}], reply=f"No, {API_KEY}")
    verdict = Verdict(claim=claim, label="unsupported", reason="secret=x", calls=[call])
    report = Report(method="m", score=0.0, verdicts=[verdict], details={"error": f"at {UPSTREAM}"})
    out = redact_report(report)
    assert out.verdicts[0].claim.text == claim.text and out.verdicts[0].calls[0].messages == call.messages
    assert out.verdicts[0].reason == f"secret={MASK}" and out.verdicts[0].calls[0].reply == f"No, {MASK}"
    assert_no_secret(out.model_dump_json())
    clean = Report(method="m", score=1.0, details={"n": 1})
    assert redact_report(clean) is clean
