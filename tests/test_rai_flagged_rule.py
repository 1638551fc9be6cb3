"""RAI's flagged items as the DCR paper has them (Z < 1), the sentence rule as a named option."""

from __future__ import annotations

import pytest

from halluscope.bench.suite_improve import rai_improvement_suite
from halluscope.bench.suites import SuiteContext
from halluscope.records import Example, Report


def _report(score: float, sentences: list[int], fixed: bool) -> Report:
    rounds = [
        {"round": 0, "text": "t", "score": score, "consistent": False, "inconsistent_sentences": sentences},
        {"round": 1, "text": "u", "score": 1.0 if fixed else 0.8, "consistent": fixed, "inconsistent_sentences": []},
    ]
    return Report(method="improve", score=score, details={"rounds": rounds, "max_rounds": 1})


@pytest.mark.parametrize("rule,flagged", [(None, 2), ("paper", 2), ("sentences", 1)])
def test_a_negative_paragraph_reason_alone_flags_the_item_under_the_papers_rule(tmp_path, rule, flagged):
    examples = [Example(id=str(i), source="s", target="t") for i in range(3)]
    reports = [
        _report(0.5, [1], fixed=True),  # a sentence judged inconsistent
        _report(0.9, [], fixed=False),  # no sentence, but a negative paragraph-level reason: Z < 1
        _report(1.0, [], fixed=False),  # consistent
    ]
    extra = {} if rule is None else {"rai_flagged": rule}
    ctx = SuiteContext(out_dir=tmp_path, method="improve", model="m", dataset="d", n_bootstrap=0, extra=extra)
    m = rai_improvement_suite(examples, reports, ctx).metrics
    assert m["n_flagged"] == flagged and m["flagged_rule"] == (rule or "paper")
