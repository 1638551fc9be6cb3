"""Tables in and out: ``halluscope.evaluate`` -> a DataFrame (also inside a running event loop), and
``halluscope check --input/--output`` over JSONL, CSV and parquet, resumed after ``kill -9`` with nothing lost or
repeated (a subprocess stopped at a known row by a stub endpoint that holds its next request)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import halluscope
from halluscope.methods.base import Method
from halluscope.records import Evidence, Finding, Report, Span
from halluscope.tabular import RESULT_COLUMNS, PartialResults, TableError

pd = pytest.importorskip("pandas", reason="dataframe extra not installed: pip install 'halluscope[dataframe]'")

REPO = Path(__file__).resolve().parents[1]


class FlagsTheMoon(Method):
    """A tiny offline method with exact findings: the word "moon" in the target is unsupported."""

    name = "flags_the_moon"
    uses_llm = False

    async def run(self, source: str, target: str) -> Report:
        at = target.find("moon")
        if at < 0:
            return Report(method=self.name, score=1.0)
        evidence = Evidence(text=source[:7], span=Span(start=0, end=7), relation="related")
        finding = Finding(
            description="the moon is not in the source", target_spans=[Span(start=at, end=at + 4)], evidence=[evidence]
        )
        return Report(method=self.name, score=0.0, findings=[finding])


def test_evaluate_a_dataframe_keeps_its_columns_and_index():
    frame = pd.DataFrame(
        {
            "source": ["The sun rose.", "The sun rose.", ""],
            "target": ["The sun rose.", "The moon rose.", "Anything."],
            "id": [7, 8, 9],
        },
        index=["a", "b", "c"],
    )
    out = halluscope.evaluate(frame, method=FlagsTheMoon())
    assert list(out.columns) == ["source", "target", "id", *RESULT_COLUMNS]
    assert list(out.index) == ["a", "b", "c"] and list(out["id"]) == [7, 8, 9]
    assert out.loc["a", "score"] == 1.0 and out.loc["a", "label"] == "consistent"
    assert out.loc["b", "score"] == 0.0 and out.loc["b", "label"] == "inconsistent" and out.loc["b", "n_findings"] == 1
    (finding,) = out.loc["b", "findings"]
    assert finding["spans"] == [{"start": 4, "end": 8, "text": "moon"}]
    assert finding["evidence"] == [{"text": "The sun", "relation": "related", "start": 0, "end": 7}]
    assert finding["description"] == "the moon is not in the source" and finding["kind"] == "unsupported"
    assert pd.isna(out.loc["c", "score"]) and out.loc["c", "unscored_reason"].startswith("bad input: source is empty")
    assert list(out["calls"]) == [0, 0, 0] and out["cost_usd"].isna().all()


def test_evaluate_rows_with_named_columns_matches_check():
    rows = [
        {"context": "Paris is the capital of France.", "answer": "Paris is the capital of France."},
        {"context": "Paris is the capital of France.", "answer": "Berlin hosts the Olympic games."},
    ]
    out = halluscope.evaluate(rows, source="context", target="answer", method="rouge", threshold=0.5)
    expected = [halluscope.check(r["context"], r["answer"], method="rouge").score for r in rows]
    assert list(out["score"]) == pytest.approx(expected)
    assert list(out["label"]) == ["consistent", "inconsistent"] and list(out["method"]) == ["rouge", "rouge"]


async def test_evaluate_and_check_work_inside_a_running_event_loop():
    rows = [{"source": "The cat sat on the mat.", "target": "The cat sat."}]
    out = halluscope.evaluate(rows, method="rouge")  # a notebook cell: sync call, loop already running
    assert out.loc[0, "score"] == 1.0
    assert halluscope.check("The cat sat on the mat.", "The cat sat.", method="rouge").score == 1.0
    assert halluscope.check_many([("The cat sat on the mat.", "The cat sat.")], method="rouge")[0].score == 1.0
    awaited = await halluscope.aevaluate(rows, method="rouge")
    assert awaited.loc[0, "score"] == 1.0


def test_a_missing_column_or_a_result_column_in_the_input_is_refused():
    with pytest.raises(TableError, match="no target column 'answer'"):
        halluscope.evaluate([{"source": "a", "target": "b"}], target="answer", method="rouge")
    with pytest.raises(TableError, match="result column"):
        halluscope.evaluate([{"source": "a", "target": "b", "score": 1}], method="rouge")


# ---- files through the CLI -----------------------------------------------------------------------------


def cli(*args: str, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "halluscope.cli.main", "check", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env or os.environ.copy(),
        **kwargs,
    )


def write_pairs(path: Path, n: int) -> list[dict]:
    rows = [
        {"id": f"p{i}", "source": f"Source {i}: the cat sat on the mat.", "target": f"Claim number {i}."}
        for i in range(n)
    ]
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pd.DataFrame(rows).to_csv(path, index=False)
    return rows


@pytest.mark.parametrize("fmt_in, fmt_out", [(".csv", ".parquet"), (".jsonl", ".csv"), (".csv", ".jsonl")])
def test_check_a_table_round_trips_every_row_in_order(tmp_path, fmt_in, fmt_out):
    if ".parquet" in (fmt_in, fmt_out):
        pytest.importorskip("pyarrow")
    rows = write_pairs(tmp_path / f"pairs{fmt_in}", 5)
    out = tmp_path / f"results{fmt_out}"
    done = cli("--input", str(tmp_path / f"pairs{fmt_in}"), "--output", str(out), "--method", "rouge", "--no-progress")
    assert done.returncode == 1, done.stderr  # rouge finds these claims inconsistent: exit 1, as a linter
    assert "wrote 5 rows" in done.stdout and "5 scored, 0 unscored, 5 inconsistent" in done.stdout
    if fmt_out == ".jsonl":
        got = [json.loads(line) for line in out.read_text().splitlines()]
    else:
        frame = pd.read_parquet(out) if fmt_out == ".parquet" else pd.read_csv(out)
        got = frame.to_dict("records")
        for row in got:
            row["findings"] = json.loads(row["findings"])
    assert [r["id"] for r in got] == [r["id"] for r in rows] and [r["target"] for r in got] == [
        r["target"] for r in rows
    ]
    expected = [halluscope.check(r["source"], r["target"], method="rouge").score for r in rows]
    assert [r["score"] for r in got] == pytest.approx(expected)
    assert all(r["findings"] == [] and r["method"] == "rouge" for r in got)
    assert not (tmp_path / f"results{fmt_out}.partial.jsonl").exists()


def test_a_line_cut_by_a_crash_is_redone_and_another_runs_partial_file_is_refused(tmp_path):
    write_pairs(tmp_path / "pairs.jsonl", 3)
    out = tmp_path / "results.jsonl"
    partial = PartialResults(out)
    first = cli("--input", str(tmp_path / "pairs.jsonl"), "--output", str(out), "--method", "rouge", "--no-progress")
    assert first.returncode == 1  # inconsistent rows
    finished = [json.loads(line) for line in out.read_text().splitlines()]
    # rebuild the partial file a kill would leave: the header, one whole row, one row cut mid-line
    from halluscope.methods import get_method
    from halluscope.tabular import _sha256

    rouge = get_method("rouge")
    identity = {
        "input_sha256": _sha256(tmp_path / "pairs.jsonl"),
        "source_column": "source",
        "target_column": "target",
        "method": "rouge",
        "method_options": rouge.options(),
        "model": None,
        "prompt_version": rouge.prompt_version,
        "threshold": None,
    }
    result0 = {k: finished[0][k] for k in RESULT_COLUMNS}
    partial.path.write_text(
        json.dumps({"identity": identity})
        + "\n"
        + json.dumps({"row": 0, "result": result0})
        + "\n"
        + json.dumps({"row": 1, "result": result0})[:30]
    )
    resumed = cli("--input", str(tmp_path / "pairs.jsonl"), "--output", str(out), "--method", "rouge", "--no-progress")
    assert resumed.returncode == 1, resumed.stderr
    assert "dropped 1 unreadable line" in resumed.stderr and "(2 checked now, 1 resumed)" in resumed.stdout
    timeless = lambda rows: [{k: v for k, v in r.items() if k != "elapsed_s"} for r in rows]  # noqa: E731
    assert timeless(json.loads(line) for line in out.read_text().splitlines()) == timeless(finished)

    partial.path.write_text(json.dumps({"identity": {**identity, "method": "geval"}}) + "\n")
    refused = cli("--input", str(tmp_path / "pairs.jsonl"), "--output", str(out), "--method", "rouge", "--no-progress")
    assert refused.returncode == 2 and "holds a different run (differs in: method)" in refused.stderr


def test_killed_mid_run_then_resumed_loses_and_repeats_nothing(tmp_path):
    from tests.test_cache_backends import StubEndpoint

    rows = write_pairs(tmp_path / "pairs.csv", 6)
    out = tmp_path / "results.parquet"
    pytest.importorskip("pyarrow")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    with StubEndpoint(hold_after=3) as stub:  # answers 3 requests, then holds the 4th until released
        args = [
            "--input",
            str(tmp_path / "pairs.csv"),
            "--output",
            str(out),
            "--method",
            "geval",
            "--model",
            "stub",
            "--base-url",
            stub.base_url,
            "--concurrency",
            "1",
            "--no-cache",
            "--no-progress",
        ]
        proc = subprocess.Popen(
            [sys.executable, "-m", "halluscope.cli.main", "check", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        partial = out.with_name(out.name + ".partial.jsonl")
        deadline = time.monotonic() + 120  # only a bound on a broken run; the order is proved by the stub's hold
        while not (stub.held >= 1 and partial.exists() and len(partial.read_text().splitlines()) == 4):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never reached its 4th request"
            time.sleep(0.05)
        proc.kill()  # SIGKILL while row 3's request is in flight
        proc.wait()
        assert not out.exists()
        stub.hold_after = None  # new requests are answered; the held one stays unanswered (its client is dead)
        resumed = cli(*args, env=env)
        assert resumed.returncode == 1, resumed.stderr  # the even rows score 0.25: inconsistent
        assert "(3 checked now, 3 resumed)" in resumed.stdout
        # the LLM calls of this run are the 3 rows it checked; the 3 resumed rows' calls are counted apart
        assert "this run: 3 LLM calls" in resumed.stdout and "6 LLM calls in all" in resumed.stdout
        assert len(stub.answered) == 6 and len(set(stub.answered)) == 6  # every pair answered exactly once
        assert len(stub.arrived) == 7  # the 6 pairs + the one request the kill cut off, sent again
    got = pd.read_parquet(out)
    assert list(got["id"]) == [r["id"] for r in rows]
    assert list(got["score"]) == [1.0 if i % 2 else 0.25 for i in range(6)]  # the stub rates odd claims 5, even 2
    assert list(got["calls"]) == [1] * 6 and not partial.exists()


class Crashes(Method):
    name = "crashes"
    uses_llm = False

    async def run(self, source: str, target: str) -> Report:
        if "boom" in target:
            raise RuntimeError("a bug in a method")
        return Report(method=self.name, score=1.0)


def test_a_bug_in_a_method_is_raised_not_waited_on():
    rows = [{"source": "s", "target": t} for t in ("fine", "boom", "fine too")]
    with pytest.raises(RuntimeError, match="a bug in a method"):
        halluscope.evaluate(rows, method=Crashes(), concurrency=2)


async def test_run_sync_inside_a_running_loop_keeps_the_callers_context_variables():
    import contextvars
    import threading

    from halluscope.sync import run_sync

    tag: contextvars.ContextVar[str] = contextvars.ContextVar("tag", default="unset")
    tag.set("caller")

    async def read() -> tuple[str, str]:
        return tag.get(), threading.current_thread().name

    value, thread = run_sync(read())  # this test's own loop is running: a worker thread runs it
    assert value == "caller" and thread.startswith("halluscope-sync")


def test_a_bad_jsonl_line_is_refused_naming_the_line(tmp_path):
    from halluscope.tabular import read_table

    path = tmp_path / "pairs.jsonl"
    path.write_bytes(b'{"source": "a", "target": "b"}\n\n{"source": "caf\xe9"}\n')
    with pytest.raises(TableError, match=r"pairs\.jsonl:3: not UTF-8"):
        read_table(path)
    path.write_text('{"source": "a", "target": "b"}\n[1, 2]\n')
    with pytest.raises(TableError, match=r"pairs\.jsonl:2: expected a JSON object"):
        read_table(path)
    path.write_text('{"source": "a", "target": "b"}\n\n')
    assert read_table(path) == [{"source": "a", "target": "b"}]
