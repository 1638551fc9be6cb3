"""``benchmarks/cost.py`` resumes a stopped run: rows already measured are kept, only the missing (system,
item) rows reach the endpoint, and a resume under other settings is refused. Against a stub endpoint on
loopback (geval only, no peers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.test_cache_backends import StubEndpoint

REPO = Path(__file__).resolve().parents[1]


def write_items(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i}", "source": f"Source {i}: the cat sat on the mat.",
                                        "summary": f"Claim number {i}."}) + "\n" for i in range(n)))
    return path


def cost(stub: StubEndpoint, data: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(REPO / "benchmarks" / "cost.py"), "--data", str(data), "--out", str(out),
           "--base-url", stub.base_url, "--model", "stub", "--methods", "geval", "--no-peers", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_cost_resumes_without_measuring_a_row_twice(tmp_path):
    data = write_items(tmp_path / "items.jsonl", 3)
    out = tmp_path / "cost"
    with StubEndpoint() as stub:
        first = cost(stub, data, out, "--limit", "2")
        assert first.returncode == 0, first.stderr
        assert len(stub.arrived) == 2
        assert [json.loads(line)["item"] for line in (out / "rows.jsonl").read_text().splitlines()] == ["q0", "q1"]

        more = cost(stub, data, out, "--limit", "3")
        assert more.returncode == 0, more.stderr
        assert len(stub.arrived) == 3 and "resuming: 2 rows" in more.stderr
        result = json.loads((out / "cost.json").read_text())
        assert result["meta"]["items_run"] == 3
        assert result["summary"][0]["system"] == "geval" and result["summary"][0]["calls_per_item"] == 1.0
        assert result["summary"][0]["tokens_per_item"] == 15.0  # the stub's usage: 10 + 5 per call

        again = cost(stub, data, out, "--limit", "3")
        assert again.returncode == 0 and len(stub.arrived) == 3
        assert json.loads((out / "cost.json").read_text())["summary"] == result["summary"]

        # a kill mid-write leaves a cut-off last line: that row alone is measured again
        rows = out / "rows.jsonl"
        lines = rows.read_text().splitlines()
        rows.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])
        cut = cost(stub, data, out, "--limit", "3")
        assert cut.returncode == 0 and len(stub.arrived) == 4
        assert len(rows.read_text().splitlines()) == 3

        other = cost(stub, data, out, "--limit", "3", "--max-tokens", "64")
        assert other.returncode != 0 and "other settings" in other.stderr and len(stub.arrived) == 4

        fresh = cost(stub, data, out, "--limit", "3", "--max-tokens", "64", "--fresh")
        assert fresh.returncode == 0 and len(stub.arrived) == 7
        assert json.loads((out / "run.json").read_text())["max_tokens"] == 64
