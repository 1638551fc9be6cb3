"""``halluscope.evaluate`` on cited answers: the citation columns, offline with the scripted verdict-first judge
(tests/citation_oracle.py)."""

from __future__ import annotations

import pytest

import halluscope
from halluscope.citation_columns import CITATION_COLUMNS
from halluscope.tabular import RESULT_COLUMNS
from halluscope.text.citations import CitationStyleError
from tests.citation_oracle import CHUNKS, Oracle

pd = pytest.importorskip("pandas", reason="dataframe extra not installed: pip install 'halluscope[dataframe]'")

WRONG = "The tower was completed in 1889 [2]. It is 330 metres tall [2]."
PLAIN = "The tower is 330 metres tall."


def test_a_cited_target_gets_the_citation_columns() -> None:
    oracle = Oracle()
    frame = pd.DataFrame({"contexts": [CHUNKS[:2], CHUNKS[:2]], "response": [WRONG, PLAIN]}, index=["a", "b"])
    out = halluscope.evaluate(frame, llm=oracle.llm())
    assert list(out.columns) == ["contexts", "response", *RESULT_COLUMNS, *CITATION_COLUMNS]
    assert list(out.index) == ["a", "b"]
    cited = out.loc["a"]
    assert cited["citation_recall"] == 0.5 and cited["citation_precision"] == 0.5
    assert cited["wrong_citations"] == 1
    assert cited["chunks_to_cite"] == [
        {"sentence": "The tower was completed in 1889 [2].", "span": [0, 36], "cites": [2], "cite": 1}
    ]
    assert pd.isna(cited["citations_unchecked"])
    wrong = [f for f in cited["findings"] if f["description"].startswith("wrong citation")]
    assert len(wrong) == 1 and wrong[0]["evidence"][0]["chunk"] == 0
    assert cited["label"] == "inconsistent"  # the wrong citation is a finding like any other
    plain = out.loc["b"]
    assert plain["citations_unchecked"] == "the target carries no citation marker"
    assert pd.isna(plain["citation_recall"]) and plain["chunks_to_cite"] == []
    assert not any(f["description"].startswith("wrong citation") for f in plain["findings"])
    # the citation questions were asked: the sentence with the wrong citation against each chunk alone
    assert ("The tower was completed in 1889.", CHUNKS[0]) in oracle.asked


def test_targets_without_markers_keep_the_columns_they_had() -> None:
    out = halluscope.evaluate([{"source": CHUNKS[1], "target": PLAIN}], llm=Oracle().llm())
    assert list(out.columns) == ["source", "target", *RESULT_COLUMNS]


def test_uncited_check_names_the_chunk_to_cite() -> None:
    rows = [{"source": CHUNKS, "target": "It is 330 metres tall [2]. Eiffel's company finished a viaduct in 1884."}]
    out = halluscope.evaluate(rows, llm=Oracle().llm(), uncited="check")
    row = out.iloc[0]
    assert row["wrong_citations"] == 0
    assert row["chunks_to_cite"] == [
        {"sentence": "Eiffel's company finished a viaduct in 1884.", "span": [27, 71], "cites": [], "cite": 3}
    ]


def test_a_method_without_a_model_says_why_unless_citations_is_given() -> None:
    oracle = Oracle()
    rows = [{"source": CHUNKS[:2], "target": WRONG}]
    out = halluscope.evaluate(rows, method="rouge")
    assert "rouge uses no model" in out.iloc[0]["citations_unchecked"]
    assert pd.isna(out.iloc[0]["wrong_citations"])
    out = halluscope.evaluate(rows, method="rouge", llm=oracle.llm(), citations="brackets")
    assert out.iloc[0]["wrong_citations"] == 1 and pd.isna(out.iloc[0]["citations_unchecked"])


def test_an_ambiguous_row_says_why_and_bad_options_are_refused() -> None:
    mixed = "It was completed in 1889 [1]. It is 330 metres tall [^2]."
    out = halluscope.evaluate([{"source": CHUNKS[:2], "target": mixed}], llm=Oracle().llm())
    assert "mixes citation styles" in out.iloc[0]["citations_unchecked"]
    with pytest.raises(CitationStyleError, match="unknown citation style"):
        halluscope.evaluate([{"source": CHUNKS, "target": WRONG}], llm=Oracle().llm(), citations="harvard")
    with pytest.raises(ValueError, match="uncited must be one of"):
        halluscope.evaluate([{"source": CHUNKS, "target": WRONG}], llm=Oracle().llm(), uncited="sometimes")


def test_a_results_frame_fed_back_is_checked_again_without_duplicate_columns() -> None:
    first = halluscope.evaluate([{"source": CHUNKS[:2], "target": WRONG}], llm=Oracle().llm())
    again = halluscope.evaluate(first, llm=Oracle().llm())
    assert list(again.columns) == list(first.columns)
    assert again.iloc[0]["wrong_citations"] == 1
