"""``localize``: end-to-end LLM localization of factual inconsistencies as free-form descriptions (FINAL,
FINAL paper, §2, §4.1, App. C, H.2-H.3).

One call asks the model to describe every inconsistency of the target as a self-contained description.
The reply is a declared list (:class:`LocalizationReply`, ``{"inconsistencies": [...]}``), and an empty list
is the explicit "no inconsistency" answer. Styles:

* ``zero_shot``: the task and the reply schema (JSON mode);
* ``few_shot``: the same with three worked examples written for halluscope, answered in the same schema;
* ``cot`` (default): the model reasons step by step, then writes a ``Final Output:`` line followed by the
  same JSON object; only what follows the last such line is read, and it must be that object.

Each style has two prompt wordings (``variant=1|2``), as in the paper, which writes two per style and keeps,
per model, the one with the higher FINAL F1 on the dev split. ``variant="auto"`` (default) leaves that choice
to the bench (:mod:`halluscope.methods.localize.protocol` runs both on the dev split and records the choice); a
single check with ``auto`` uses variant 1 and says so in ``details``.

A reply that is not the declared format (prose, bullet lines, a list of placeholders, a lone "None" line in
a JSON style, a chain of thought without its marked final answer) is no answer: after one repair request
the target is *unscored* with the reason, never scored from whatever lines it had. (The paper's prompts ask
for lettered lists A., B., ...; halluscope asks for the JSON list so that an answer can be told from junk.)

2-step variants (``filter=...``): a binary decision first; only a target judged inconsistent is localized.
``filter="self"`` asks the same model (step by step, then a last line that is exactly "Final answer: yes" or
"Final answer: no"; anything else is unscored); ``filter="<method>"`` runs another registered method and
labels by ``filter_threshold`` (unset: the bench chooses it on the dev split by the F1 of flagging inconsistent
targets, as the paper does for TrueTeacher; a single check uses that method's own threshold); ``filter="oracle"``
uses the gold label and therefore only works on labelled examples in the bench harness
(:meth:`Localize.run_example`).
``hint=True`` (2-step only) tells the localizer that the target is known to contain an inconsistency and
drops the empty-list option from the instructions; if the model still answers with an empty list it is
kept as none found.

Each description becomes a Finding. Its quoted target words (the prompts ask for them), or the clause after
"the summary says ...", are located in the target (exact -> normalized -> close fuzzy); descriptions whose
wording does not allow that keep ``target_spans=[]``.

Score: ``1 / (1 + n)`` for ``n`` descriptions; 1 when there are none. Why this function: it is 1 exactly
when nothing was found (the binary decision FINAL's "binarized" baseline uses), and it keeps decreasing with
every additional inconsistency, so it still ranks targets for AUC and correlation metrics instead of
collapsing all inconsistent targets to one value. The default threshold 0.75 (anything between 0.5 and 1
is equivalent) labels a target inconsistent as soon as one description is given.

Modules: :mod:`.replies` (declared replies and parsers), :mod:`.prompts`, :mod:`.examples` (few-shot examples),
:mod:`.stages` (the localizer and filter calls, score and findings), :mod:`.method` (``Localize``).
"""

from __future__ import annotations

from halluscope.methods.localize.details import LocalizeDetails
from halluscope.methods.localize.examples import FEW_SHOT_EXAMPLES
from halluscope.methods.localize.method import Localize, LocalizeOptions
from halluscope.methods.localize.prompts import (
    _HINTS,
    BINARY_PROMPT,
    LOCALIZE_PROMPTS,
    STYLES,
    VARIANTS,
    Style,
    Variant,
)
from halluscope.methods.localize.replies import (
    FINAL_MARKER,
    LOCALIZATION_ECHOES,
    LOCALIZATION_EXAMPLES,
    HintedLocalizationReply,
    LocalizationReply,
    parse_binary_verdict,
    parse_final_output,
    parse_localization,
    reply_schema,
)
from halluscope.methods.localize.stages import (
    BinaryFilter,
    DescriptionLocalizer,
    description_score,
    findings_from_descriptions,
)

__all__ = [
    "LocalizeDetails",
    "BINARY_PROMPT",
    "FEW_SHOT_EXAMPLES",
    "FINAL_MARKER",
    "LOCALIZATION_ECHOES",
    "LOCALIZATION_EXAMPLES",
    "LOCALIZE_PROMPTS",
    "STYLES",
    "VARIANTS",
    "BinaryFilter",
    "DescriptionLocalizer",
    "HintedLocalizationReply",
    "LocalizationReply",
    "Localize",
    "LocalizeOptions",
    "Style",
    "Variant",
    "_HINTS",
    "description_score",
    "findings_from_descriptions",
    "parse_binary_verdict",
    "parse_final_output",
    "parse_localization",
    "reply_schema",
]
