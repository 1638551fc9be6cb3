"""Sources given as lists of retrieved chunks: the Python API, ``evaluate`` with RAGAS and DeepEval columns,
``check --input`` with a list field, the CLI's ``--context``; every piece of evidence names its chunk."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import halluscope
from halluscope.cli.main import app
from halluscope.contexts import CHUNK_SEPARATOR, chunk_of, join_contexts
from halluscope.methods.base import InputError, Method
from halluscope.records import Claim, Evidence, Finding, Report, Span, Verdict

CHUNKS = ["Paris is the capital of France.", "It has 2.1 million inhabitants."]
ANSWER = "Paris has 9 million inhabitants."


class QuotesTheSecondChunk(Method):
    """Flags "9 million" with one verbatim quote of the second chunk, one quote over both chunks as support,
    and one paraphrase that is located nowhere: exact, offline."""

    name = "quotes_the_second_chunk"
    uses_llm = False

    async def run(self, source: str, target: str) -> Report:
        second = source.index("It has")
        quote = Evidence(text=source[second:], span=Span(start=second, end=len(source)), relation="contradicts")
        across = Evidence(text=source, span=Span(start=0, end=len(source)), relation="supports")
        loose = Evidence(text="a paraphrase", relation="related")
        at = target.index("9 million")
        finding = Finding(
            description="the source says 2.1 million",
            kind="contradicted",
            target_spans=[Span(start=at, end=at + 9)],
            evidence=[quote, loose],
        )
        verdict = Verdict(
            claim=Claim(text=target, target_spans=[Span(start=0, end=len(target))]),
            label="contradicted",
            evidence=[quote, across],
        )
        return Report(method=self.name, score=0.0, findings=[finding], verdicts=[verdict])


def test_join_keeps_every_chunk_at_its_span_and_refuses_what_is_not_text() -> None:
    joined, spans = join_contexts(CHUNKS + [""])
    assert joined == CHUNK_SEPARATOR.join(CHUNKS + [""])
    assert [s.of(joined) for s in spans] == CHUNKS + [""]
    assert chunk_of(spans, Span(start=spans[1].start + 3, end=spans[1].start + 6)) == (1, Span(start=3, end=6))
    assert chunk_of(spans, Span(start=spans[0].end + 1, end=spans[0].end + 2)) is None  # inside the separator
    with pytest.raises(ValueError, match="empty list"):
        join_contexts([])
    with pytest.raises(ValueError, match="chunk 1 must be a string, got int"):
        join_contexts(["a", 3])


def test_check_a_list_of_chunks_names_the_chunk_of_every_evidence() -> None:
    report = QuotesTheSecondChunk().check(CHUNKS, ANSWER)
    joined = CHUNK_SEPARATOR.join(CHUNKS)
    assert [s.of(joined) for s in report.source_chunks] == CHUNKS
    quote, loose = report.findings[0].evidence
    assert (quote.chunk, quote.chunk_span) == (1, Span(start=0, end=len(CHUNKS[1])))
    assert quote.chunk_span.of(CHUNKS[quote.chunk]) == quote.text == CHUNKS[1]
    assert loose.chunk is None and loose.span is None  # a paraphrase names no chunk
    # a verbatim quote over both chunks is cut into one piece per chunk, each naming its own
    pieces = [e for e in report.verdicts[0].evidence if e.relation == "supports"]
    assert [(e.chunk, e.text) for e in pieces] == [(0, CHUNKS[0]), (1, CHUNKS[1])]
    assert all(e.chunk_span.of(CHUNKS[e.chunk]) == e.text for e in pieces)
    assert Report.model_validate_json(report.model_dump_json()) == report  # lossless with the new fields


def test_old_reports_without_chunk_fields_still_load() -> None:
    old = {"method": "m", "score": 0.5, "findings": [{"description": "d", "evidence": [{"text": "t"}]}]}
    report = Report.model_validate(old)
    assert report.source_chunks == [] and report.findings[0].evidence[0].chunk is None


def test_the_public_api_takes_chunks_and_says_which_one_is_bad() -> None:
    report = halluscope.check(CHUNKS, ANSWER, method="gate")
    assert report.label == "inconsistent" and report.findings
    assert {e.chunk for f in report.findings for e in f.evidence} <= {0, 1}
    assert halluscope.check_many([(CHUNKS, ANSWER), ("Paris.", "Paris.")], method="rouge")[0].source_chunks
    bad = halluscope.check_many([(["ok", 7], ANSWER)], method="rouge")[0]
    assert bad.score is None and "chunk 1 must be a string" in bad.unscored_reason
    with pytest.raises(InputError, match="empty list"):
        halluscope.check([], ANSWER, method="rouge")


pd = pytest.importorskip("pandas", reason="dataframe extra not installed")


@pytest.mark.parametrize(
    "source, target, question",
    [("retrieved_contexts", "response", "user_input"), ("retrieval_context", "actual_output", "input")],
)
def test_evaluate_takes_ragas_and_deepeval_frames_unchanged(source, target, question) -> None:
    frame = pd.DataFrame({question: ["How many people live in Paris?"], source: [CHUNKS], target: [ANSWER]})
    out = halluscope.evaluate(frame, method=QuotesTheSecondChunk())
    assert list(out.columns[:3]) == [question, source, target]
    (finding,) = out.loc[0, "findings"]
    assert finding["evidence"][0] == {
        "text": CHUNKS[1],
        "relation": "contradicts",
        "start": len(CHUNKS[0]) + 2,
        "end": len(CHUNKS[0]) + 2 + len(CHUNKS[1]),
        "chunk": 1,
        "chunk_start": 0,
        "chunk_end": len(CHUNKS[1]),
    }


def test_evaluate_names_the_columns_it_looked_for() -> None:
    with pytest.raises(ValueError, match="no source column: expected one of source, retrieved_contexts"):
        halluscope.evaluate([{"docs": "a", "response": "b"}], method="rouge")


def test_check_input_reads_a_json_list_field(tmp_path) -> None:
    from halluscope.sync import run_sync
    from halluscope.tabular import check_file

    (tmp_path / "rag.jsonl").write_text(json.dumps({"retrieved_contexts": CHUNKS, "response": ANSWER}) + "\n")
    pd.DataFrame({"source": [json.dumps(CHUNKS)], "target": [ANSWER]}).to_csv(tmp_path / "rag.csv", index=False)
    for name in ("rag.jsonl", "rag.csv"):
        out = tmp_path / f"out-{name}"
        run_sync(check_file(QuotesTheSecondChunk(), tmp_path / name, out, progress=False))
        rows = pd.read_csv(out) if name.endswith(".csv") else pd.read_json(out, lines=True)
        findings = rows.loc[0, "findings"]
        findings = json.loads(findings) if isinstance(findings, str) else findings
        assert findings[0]["evidence"][0]["chunk"] == 1, name


def test_cli_context_files_and_a_json_list(tmp_path) -> None:
    runner = CliRunner()
    (tmp_path / "a.txt").write_text(CHUNKS[0])
    (tmp_path / "b.txt").write_text("Some intro.\n" + CHUNKS[1])
    (tmp_path / "chunks.json").write_text(json.dumps(CHUNKS))
    (tmp_path / "answer.txt").write_text(ANSWER)
    target = str(tmp_path / "answer.txt")
    files = runner.invoke(
        app, ["check", "-c", str(tmp_path / "a.txt"), "-c", str(tmp_path / "b.txt"), "-t", target, "--method", "gate"]
    )
    assert files.exit_code == 1, files.output
    assert f'{target}:1:11: unsupported: "9"' in files.output
    assert f"{tmp_path / 'b.txt'}:1:1 (chunk 1)" in files.output  # the chunk's own file and line
    listed = runner.invoke(
        app, ["check", "-c", str(tmp_path / "chunks.json"), "-t", target, "--method", "gate", "--format", "json"]
    )
    report = Report.model_validate_json(listed.output)
    assert len(report.source_chunks) == 2 and report.label == "inconsistent"
    (tmp_path / "bad.json").write_text('{"not": "a list"}')
    bad = runner.invoke(app, ["check", "-c", str(tmp_path / "bad.json"), "-t", target, "--method", "gate"])
    assert bad.exit_code == 2 and "JSON list of strings" in bad.output
    both = runner.invoke(app, ["check", "-s", str(tmp_path / "a.txt"), "-c", str(tmp_path / "a.txt"), "-t", target])
    assert both.exit_code == 2 and "not both" in both.output


def test_the_web_report_numbers_findings_and_lists_every_claim_with_its_chunk() -> None:
    from halluscope.report import render_html

    target = "Paris has 9 million inhabitants. Paris is the capital of France."
    report = halluscope.check(CHUNKS, target, method="gate")
    page = render_html(report, CHUNK_SEPARATOR.join(CHUNKS), target)
    assert 'data-n="1" title=' in page and ">9</mark>" in page  # finding 1 numbered on its span
    claims = page.split("passing ones too", 1)[1].split("</section>", 1)[0]
    assert "<td class='ok'>supported</td>" in claims and "<td class='bad'>unsupported</td>" in claims
    assert "supports in chunk 0: “Paris is the capital of France.”" in claims


def test_framework_documents_are_checked_as_chunks() -> None:
    pytest.importorskip("langchain_core", reason="langchain extra not installed")
    from halluscope.integrations.langchain import check_documents

    report = check_documents(ANSWER, ["", *CHUNKS], method="gate")  # a blank document is dropped
    assert len(report.source_chunks) == 2
    assert {e.chunk for f in report.findings for e in f.evidence} == {0, 1}
