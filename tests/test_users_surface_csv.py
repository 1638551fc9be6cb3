"""`check --input` CSV output: every list cell is JSON (what its own input accepts), and the output fed back as
input checks again (its old result columns replaced) with the same pairs and results."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluscope.cli.main import app

pytest.importorskip("pandas")

REPO = Path(__file__).resolve().parents[1]
RAG = REPO / "examples" / "rag.jsonl"


def _check(input_file: Path, output_file: Path) -> int:
    args = ["check", "--input", str(input_file), "--output", str(output_file), "--method", "gate", "--no-progress"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code in (0, 1), result.output
    return result.exit_code


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_list_cells_are_json_and_the_output_checks_again_as_input(tmp_path) -> None:
    first, second = tmp_path / "results.csv", tmp_path / "again.csv"
    code = _check(RAG, first)
    rows = _rows(first)
    given = [json.loads(line) for line in RAG.read_text().splitlines() if line.strip()]
    lists = [k for k, v in given[0].items() if isinstance(v, list)]
    assert lists  # the example holds chunks
    for row, original in zip(rows, given):
        for column in lists:
            assert json.loads(row[column]) == original[column]  # JSON, not a Python repr
        assert isinstance(json.loads(row["findings"]), list)
    assert _check(first, second) == code
    again = _rows(second)
    assert [r[c] for r in again for c in lists] == [r[c] for r in rows for c in lists]
    assert [(r["score"], r["label"], r["findings"]) for r in again] == [
        (r["score"], r["label"], r["findings"]) for r in rows
    ]
    assert list(again[0]) == list(rows[0])  # the same columns, the results once


def test_a_table_with_only_some_result_columns_is_still_refused(tmp_path) -> None:
    table = tmp_path / "in.csv"
    table.write_text('source,target,score\n"The cat sat.","The cat sat.",1\n')
    result = CliRunner().invoke(
        app, ["check", "--input", str(table), "--output", str(tmp_path / "o.csv"), "--method", "gate"]
    )
    assert result.exit_code == 2 and "already has result column(s) ['score']" in result.stderr
