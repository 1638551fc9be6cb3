"""The web report (HTML) and the HTTP service."""

from __future__ import annotations

import pytest

from halluscope.config import Config
from halluscope.methods import get_method
from halluscope.records import Claim, Evidence, Finding, Report, Span, Verdict
from halluscope.report import render_html

SOURCE = "The council met on Monday. It approved the budget of $3 million."
TARGET = "The council met on Friday. It approved the <budget>."


def _report() -> Report:
    friday = TARGET.index("Friday")
    return Report(
        method="fake",
        score=0.25,
        subscores={"S_E": 0.5, "alpha": None},
        claims=[Claim(text="The council met on Friday.", kind="event", order=0, target_spans=[Span(start=0, end=26)])],
        findings=[
            Finding(
                description='The source says "Monday", not Friday.',
                kind="contradicted",
                target_spans=[Span(start=friday, end=friday + 6), Span(start=0, end=26)],
                evidence=[Evidence(text="Monday", span=Span(start=19, end=25), relation="contradicts")],
            ),
            Finding(description="Not located anywhere", kind="unsupported"),
        ],
    )


def test_html_marks_spans_escapes_text_and_links_evidence():
    page = render_html(_report(), SOURCE, TARGET)
    assert "&lt;budget&gt;" in page and "<budget>" not in page  # target text is escaped
    # overlapping spans: "Friday" is covered by both spans of finding 0 -> one mark for the piece
    assert (
        '<mark class="contra" data-f="0 0" data-n="1" title="The source '
        'says &quot;Monday&quot;, not Friday.">Friday</mark>'
    ) in page
    assert (
        '<mark class="contra" data-f="0" title="The source says '
        '&quot;Monday&quot;, not Friday.">The council met on </mark>'
    ) in page
    assert 'class="ev" data-f="0"' in page and ">Monday</mark>" in page  # evidence in the source
    assert "not located in the text" in page  # finding without spans kept as a description
    assert "Events in target order" in page and "S_E" in page and "0.250" in page


def test_html_handles_unscored_report():
    page = render_html(Report(method="geval", unscored_reason="unparseable reply"), SOURCE, TARGET)
    assert "could not score: unparseable reply" in page and "unscored" in page


def test_unscored_claims_are_listed_with_their_reasons_and_marked_apart_from_findings():
    claim = Claim(text="It approved the <budget>.", target_spans=[Span(start=27, end=52)])
    judged = Claim(text="The council met on Friday.", target_spans=[Span(start=0, end=26)])
    report = Report(
        method="probe",
        unscored_reason="none of the claims could be judged",
        verdicts=[
            Verdict(claim=claim, label="unscored", reason="evidence finding failed: the JSON in the reply is cut off"),
            Verdict(claim=judged, label="supported", reason="quoted"),
        ],
    )
    page = render_html(report, SOURCE, TARGET)
    assert "Unscored claims (1)" in page and "1 unscored claims" in page
    assert "not judged: evidence finding failed: the JSON in the reply is cut off" in page
    assert "It approved the &lt;budget&gt;." in page
    assert '<mark class="unscored" data-f="u0"' in page  # the claim's span, marked as unscored, not as a finding
    assert 'mark class="unsup"' not in page and "Findings (0)" in page


fastapi = pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")


@pytest.fixture
def client(tmp_path):
    from fastapi.testclient import TestClient

    from halluscope.server import ServerSettings, create_app

    app = create_app(Config(cache=False), ServerSettings(token="s3cret", max_chars=500, timeout_s=30))
    return TestClient(app)


AUTH = {"Authorization": "Bearer s3cret"}


def test_server_requires_token(client):
    assert client.get("/health").status_code == 200
    assert client.post("/check", json={"source": SOURCE, "target": TARGET, "method": "rouge"}).status_code == 401
    bad = client.post("/check", json={"source": SOURCE, "target": TARGET}, headers={"Authorization": "Bearer no"})
    assert bad.status_code == 401


def test_server_check_json_and_html(client):
    r = client.post("/check", json={"source": SOURCE, "target": TARGET, "method": "rouge"}, headers=AUTH)
    assert r.status_code == 200, r.text
    report = Report.model_validate(r.json())
    assert report.method == "rouge" and report.score == get_method("rouge").check(SOURCE, TARGET).score > 0
    h = client.post("/check?format=html", json={"source": SOURCE, "target": TARGET, "method": "rouge"}, headers=AUTH)
    assert h.status_code == 200 and h.text.startswith("<!doctype html>")


def test_server_rejects_bad_requests(client):
    too_big = client.post("/check", json={"source": "x" * 600, "target": "y", "method": "rouge"}, headers=AUTH)
    assert too_big.status_code == 413
    unknown = client.post("/check", json={"source": SOURCE, "target": TARGET, "method": "nope"}, headers=AUTH)
    assert unknown.status_code == 400 and "unknown method" in unknown.json()["detail"]
    empty = client.post("/check", json={"source": "  ", "target": TARGET, "method": "rouge"}, headers=AUTH)
    assert empty.status_code == 422


def _script_data(page: str, element_id: str) -> str:
    """The text content of ``<script id=element_id>`` as an HTML parser (a browser) reads it."""
    from html.parser import HTMLParser

    class Reader(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.inside = False
            self.data: list[str] = []

        def handle_starttag(self, tag, attrs) -> None:
            self.inside = tag == "script" and dict(attrs).get("id") == element_id

        def handle_endtag(self, tag) -> None:
            self.inside = False

        def handle_data(self, data) -> None:
            if self.inside:
                self.data.append(data)

    reader = Reader()
    reader.feed(page)
    return "".join(reader.data)


def test_html_embeds_report_data_as_valid_json():
    import json

    hostile = 'Says </script><script>alert(1)</script> and <!-- <script> & "quotes" &amp; \u2028 é'
    report = _report().model_copy(
        update={
            "findings": [Finding(description=hostile, kind="unsupported")],
            "unscored_reason": None,
        }
    )
    page = render_html(report, SOURCE, TARGET)
    data = _script_data(page, "report-data")
    assert "</" not in data and "<!--" not in data  # nothing in it can end the script element
    assert json.loads(data) == json.loads(report.model_dump_json())  # exactly the report, not HTML-escaped
    assert "alert(1)</script>" not in page.split('id="report-data">', 1)[1].split("</script>", 1)[0]
