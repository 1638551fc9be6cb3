"""Attack one stage at a time (the fast subset of ``benchmarks/fuzz_table.py --stage-by-stage``).

A scripted model (:mod:`tests.stage_fuzz`) answers every stage validly and attacks only the named verdict stage,
first answer and repair: the schema's example (alone, in the format text), the prompt echoed, two verdicts, repeated
keys, look-alike labels, a second verdict hidden (keys differing in case, nested, listed, after 250 bracketed tokens),
``amc=rule`` negations and hedged reasons, and one reply of each garbage class of the older fuzz table. Every
check must reach the attacked stage, and no score may come from an attacked reply."""

from __future__ import annotations

from collections import Counter

import pytest

from halluscope.llm.replies import Reply
from tests.stage_fuzz import (
    RULE_CLASSES,
    STAGE_CONFIGS,
    STRUCTURAL_CLASSES,
    StageScript,
    config_label,
    fuzz_stage,
    run_check,
    stage_of,
    verdict_stages_reached,
)
from tests.test_fuzz_methods import GARBAGE

FAST_GARBAGE = {cls: items[:1] for cls, items in GARBAGE.items() if cls != "huge"}
NO_REPAIR = {"geval_paper"}  # G-Eval's score-only form is asked once: its reply is a score or nothing
CLASSES = list(STRUCTURAL_CLASSES) + list(RULE_CLASSES) + list(FAST_GARBAGE)


def test_every_configuration_reaches_a_verdict_stage_with_valid_replies():
    for method, options in STAGE_CONFIGS:
        stages = verdict_stages_reached(method, options)
        assert stages, config_label(method, options)


def test_the_scripted_model_recognises_its_requests():
    script = StageScript()
    report = run_check("factscore", {"batch_size": 3}, script)
    assert report.score == 1.0 and not script.unknown
    assert set(script.asked) == {"factscore_decompose", "factscore_describe_batch"}
    assert all(stage_of(c.messages) in script.asked for c in report.calls)


@pytest.mark.parametrize("method, options", STAGE_CONFIGS, ids=[config_label(m, o) for m, o in STAGE_CONFIGS])
def test_attacking_one_verdict_stage_gives_no_score_and_no_crash(method, options):
    crashes: list[str] = []
    for stage in verdict_stages_reached(method, options):
        row: Counter = Counter()
        fuzz_stage(method, options, stage, CLASSES, FAST_GARBAGE, row, on_crash=crashes.append)
        label = f"{config_label(method, options)} / {stage}"
        assert row["checks"] > 0, label
        assert row["reached"] == row["checks"], f"{label}: the attacked stage was not always reached: {dict(row)}"
        if stage in NO_REPAIR:
            assert row["attacked_replies"] == row["checks"], label  # one call, no repair request
        else:
            assert row["attacked_replies"] > row["checks"], label  # refused answers got their repair request
        assert row["scores_from_attack"] == 0, f"{label}: {dict(row)}"
        assert row["crashes"] == 0, crashes


def test_the_suite_catches_a_parser_that_takes_the_example(monkeypatch):
    """The count can fail: with example echoes no longer refused, the echoed batch example is scored."""
    monkeypatch.setattr(Reply, "echoes", classmethod(lambda cls: []))
    row: Counter = Counter()
    fuzz_stage("factscore", {"batch_size": 3}, "factscore_describe_batch", ["example_alone"], {}, row)
    assert row["checks"] == 2 and row["reached"] == 2  # the example alone, and with a third entry added
    assert row["scores_from_attack"] > 0
