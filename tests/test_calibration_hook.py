"""The bench's calibration hook: any method that leaves a choice to dev items is calibrated through
``Method.calibrate`` (the bench names no method), and its record lands in results.json, run.json and results.md."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from halluscope.bench.datasets import Dataset
from halluscope.bench.folder import RESULTS_MD
from halluscope.bench.runner import ITEMS_FILE, RUN_FILE, run_bench
from halluscope.methods.base import Method
from halluscope.options import MethodOptions
from halluscope.records import Example, Report


class CutOptions(MethodOptions):
    cut: float | None = None
    """The length above which a target is flagged; None: chosen on dev items."""


class CutRecord(BaseModel):
    cut: float
    dev_ids: list[str]
    dev_scores: list[float | None]

    def choices(self) -> dict[str, Any]:
        return {"cut": self.cut}

    def markdown(self) -> list[str]:
        return [f"**cut** chosen on {len(self.dev_ids)} dev items: {self.cut}", ""]


class LengthCut(Method):
    """A toy method with one dev-set choice: flags targets longer than ``cut`` characters."""

    name = "length_cut"
    uses_llm = False
    Options = CutOptions
    opts: CutOptions
    calibrated: list[list[str]] = []

    async def run(self, source: str, target: str) -> Report:
        cut = self.opts.cut if self.opts.cut is not None else 1e9
        return Report(method=self.name, score=0.0 if len(target) > cut else 1.0)

    def needs_calibration(self) -> bool:
        return self.opts.cut is None

    async def calibrate(self, dev_items, bench):
        LengthCut.calibrated.append([e.id for e in dev_items])
        probe = LengthCut(cut=1e9)  # scored on the dev items through the bench (a run of its own)
        results, reports = await bench.score(
            probe, list(dev_items), bench.selection_name, bench.out_dir / "calibration", judge=bench.judge, suites=()
        )
        assert results["n"] == len(dev_items)
        cut = min(len(e.target) for e in dev_items if e.label == 0) - 0.5
        record = CutRecord(cut=cut, dev_ids=[e.id for e in dev_items], dev_scores=[r.score for r in reports])
        return LengthCut(cut=cut), record


def _examples() -> list[Example]:
    targets = ["short", "a much longer target text", "tiny", "another quite long target", "mid size", "x" * 30]
    return [
        Example(id=f"e{i}", source="s", target=t, label=0 if len(t) > 20 else 1, split="dev" if i < 3 else "test")
        for i, t in enumerate(targets)
    ]


async def test_a_method_that_needs_calibration_is_calibrated_on_the_dev_split(tmp_path):
    LengthCut.calibrated.clear()
    results = await run_bench(LengthCut(), Dataset("toy", None, _examples()), tmp_path, progress=False, n_bootstrap=0)
    assert LengthCut.calibrated == [["e0", "e1", "e2"]]  # the run's dev split
    assert results["final_protocol"]["cut"] == 24.5 and results["final_protocol"]["dev_ids"] == ["e0", "e1", "e2"]
    assert results["method_options"] == {"cut": 24.5}  # the calibrated method is what was scored
    assert json.loads((tmp_path / RUN_FILE).read_text())["final_protocol"] == {"cut": 24.5}
    assert "**cut** chosen on 3 dev items: 24.5" in (tmp_path / RESULTS_MD).read_text()
    rows = [json.loads(line) for line in (tmp_path / ITEMS_FILE).read_text().splitlines()]
    assert {r["example_id"]: r["report"]["score"] for r in rows} == {
        "e0": 1.0,
        "e1": 0.0,
        "e2": 1.0,
        "e3": 0.0,
        "e4": 1.0,
        "e5": 0.0,
    }
    assert (tmp_path / "calibration" / ITEMS_FILE).is_file()  # the dev scoring is a bench run of its own


async def test_holdout_items_are_calibrated_on_and_not_scored(tmp_path):
    LengthCut.calibrated.clear()
    results = await run_bench(
        LengthCut(), Dataset("toy", None, _examples()), tmp_path, progress=False, n_bootstrap=0, select_holdout=0.5
    )
    held = set(LengthCut.calibrated[0])
    assert len(held) == 3 and results["n"] == 3
    scored = {json.loads(line)["example_id"] for line in (tmp_path / ITEMS_FILE).read_text().splitlines()}
    assert scored.isdisjoint(held) and len(scored) == 3


async def test_a_method_with_nothing_to_choose_is_not_calibrated(tmp_path):
    LengthCut.calibrated.clear()
    results = await run_bench(
        LengthCut(cut=10),
        Dataset("toy", None, _examples()),
        tmp_path,
        progress=False,
        n_bootstrap=0,
        select_holdout=0.5,
    )
    assert LengthCut.calibrated == [] and results["final_protocol"] is None and results["n"] == 6
    assert "final_protocol" not in json.loads((tmp_path / RUN_FILE).read_text())
