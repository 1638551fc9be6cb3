"""The batch prompts are built from the same pieces as their single-item prompts (one wording), and the text
sent to the model is pinned: a changed fingerprint means every recorded replay of that prompt must be recorded
again (``tests/replays``), so a rewording is a deliberate change, never a side effect of a refactor."""

from __future__ import annotations

import pytest

from halluscope.methods.dcr import prompts as dcr
from halluscope.methods.factscore import prompts as factscore

PINNED = {
    factscore.FACTSCORE_VERIFY_PROMPT: "factscore_verify@2#83f5d884",
    factscore.FACTSCORE_DESCRIBE_PROMPT: "factscore_describe@2#a63bff62",
    factscore.FACTSCORE_VERIFY_BATCH_PROMPT: "factscore_verify_batch@1#76068b22",
    factscore.FACTSCORE_DESCRIBE_BATCH_PROMPT: "factscore_describe_batch@1#33d2a9e8",
    dcr.DCE_EXCERPT_PROMPT: "dcr_dce_excerpt@2#cc769503",
    dcr.DCE_EXCERPT_BATCH_PROMPT: "dcr_dce_excerpt_batch@1#0cf702ac",
}


@pytest.mark.parametrize("template", list(PINNED), ids=lambda t: t.name)
def test_the_wording_sent_to_the_model_is_pinned(template):
    assert template.ref() == PINNED[template]


@pytest.mark.parametrize(
    ("single", "batch"),
    [
        (factscore.FACTSCORE_VERIFY_PROMPT, factscore.FACTSCORE_VERIFY_BATCH_PROMPT),
        (factscore.FACTSCORE_DESCRIBE_PROMPT, factscore.FACTSCORE_DESCRIBE_BATCH_PROMPT),
    ],
)
def test_a_factscore_batch_states_the_single_rule(single, batch):
    rule = factscore._SUPPORT_RULE
    assert rule in single.user and rule in batch.user
    described = factscore._DESCRIBE_RULE in single.user
    assert described == (factscore._DESCRIBE_RULE in batch.user) == ("describe" in single.name)
    assert single.user.endswith("FACT:\n$fact") and batch.user.endswith("FACTS:\n$facts")


def test_the_dcr_excerpt_batch_states_the_single_rule():
    single, batch = dcr.DCE_EXCERPT_PROMPT.user, dcr.DCE_EXCERPT_BATCH_PROMPT.user
    assert dcr._EXCERPT_RULE in single and dcr._EXCERPT_RULE in batch
    assert "one SENTENCE" in single and "numbered SENTENCES" in batch and "$count" in batch


def test_a_batch_render_numbers_its_items_under_the_shared_wording():
    messages = factscore.FACTSCORE_VERIFY_BATCH_PROMPT.render(
        source="Paris is in France.", count=2, facts="1. Paris is in France.\n2. Paris is in Italy."
    )
    user = messages[-1]["content"]
    assert "A fact is supported " + factscore._SUPPORT_RULE in user
    assert "There are 2 FACTS." in user and "Paris is in Italy." in user
