"""The replay suite: each fixture under tests/replays/ holds a real model's replies to one check; the
check is run again offline and must send exactly the recorded requests and reach exactly the recorded outcome.

A failure here after an intended prompt or parsing change: re-record with ``python benchmarks/record_replays.py``
(see docs/testing.md) and review the fixture diff.

The fixtures hold no copy of the dev data: the replays read their item from ``../shared/data``
(``HALLUSCOPE_DATA_DIR``) and are skipped, naming the file they need, when it is absent.
"""

from __future__ import annotations

import copy
import json

import pytest

from tests.replay_model import (
    ReplayDataChanged,
    ReplayDataMissing,
    fill_text,
    fixtures,
    load_fixture,
    load_stored,
    outcome,
    replay,
    sha256,
    strip_text,
)

FIXTURES = fixtures()
LLM_METHODS = {"geval", "dcr", "factscore", "probe", "dove", "localize", "improve"}


def load_or_skip(path):
    try:
        return load_fixture(path)
    except ReplayDataMissing as exc:
        pytest.skip(f"replay needs the shared dev data: {exc}")


def test_every_llm_method_has_a_replay_fixture():
    recorded = {load_stored(p)["method"] for p in FIXTURES}
    assert LLM_METHODS <= recorded, f"no replay fixture for {sorted(LLM_METHODS - recorded)}"
    gated = [load_stored(p) for p in FIXTURES if load_stored(p)["options"].get("gate") == "lexical"]
    assert any(f["method"] == "factscore" for f in gated)


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_replay_reaches_the_recorded_outcome(path):
    fixture = load_or_skip(path)
    report, model = replay(fixture)
    assert not model.unmatched, "\n\n".join(model.unmatched)
    assert model.unused() == 0, f"{model.unused()} recorded replies were never asked for"
    assert outcome(report) == fixture["outcome"]
    assert report.model == fixture["model"]


def test_a_reworded_request_fails_with_a_diff_naming_the_change():
    path = next(p for p in FIXTURES if p.stem == "geval")
    fixture = copy.deepcopy(load_or_skip(path))
    first = fixture["calls"][0]["messages"][-1]
    first["content"] = first["content"].replace("Rate", "Score", 1)  # as if the prompt had said "Score" at record time
    report, model = replay(fixture)
    assert len(model.unmatched) >= 1
    message = model.unmatched[0]
    assert "-Score" in message and "+Rate" in message
    assert report.score is None  # the unanswered request scores nothing


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_a_stored_fixture_holds_no_copy_of_its_items_text(path):
    stored = load_stored(path)
    assert set(stored["item"]) == {"dataset", "id", "fields", "source_sha256", "target_sha256"}
    fixture = load_or_skip(path)
    requests = [m["content"] for c in stored["calls"] for m in c["messages"]] + list(stored["token_counts"])
    for text in (fixture["item"]["source"], fixture["item"]["target"]):
        assert not any(text in r for r in requests)
    assert any("{{source}}" in r for r in requests) and any("{{target}}" in r for r in requests)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "plain",
        "S",
        "T",
        "S and T",
        "TS",
        "{{",
        "{{{",
        "{{source}}",
        "{{target}}",
        "{{brace}}",
        "{S}",
        "{{S}}",
        "x{S{{T}}}{",
        "{{{{source}}}}",
    ],
)
@pytest.mark.parametrize("source, target", [("S", "T"), ("S{{", "{T"), ("ab", "abc"), ("{{source}}", "{{brace}}")])
def test_stripping_a_text_is_undone_exactly(text, source, target):
    text = text.replace("S", source).replace("T", target)
    stripped = strip_text(text, source, target)
    assert fill_text(stripped, source, target) == text
    if "{{" not in source and "{{" not in target and source not in target and target not in source:
        assert source not in stripped and target not in stripped


def _data_with(tmp_path, stored, source, target):
    item = stored["item"]
    row = {item["fields"]["id"]: item["id"], item["fields"]["source"]: source, item["fields"]["target"]: target}
    path = tmp_path / item["dataset"]
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({item["fields"]["id"]: "another"}) + "\n" + json.dumps(row) + "\n")
    return tmp_path


def test_a_fixture_refuses_a_changed_dataset_row(tmp_path):
    path = next(p for p in FIXTURES if p.stem == "geval")
    stored = load_stored(path)
    data = _data_with(tmp_path, stored, "Ned: a changed dialogue", "Ned asks.")
    with pytest.raises(ReplayDataChanged, match="source of row 'samsum_train_13681548_5'.*not the text"):
        load_fixture(path, data)


def test_a_fixture_puts_the_rows_text_back_into_every_request(tmp_path):
    path = next(p for p in FIXTURES if p.stem == "geval")
    stored = load_stored(path)
    source, target = "a {{ source", "the target"
    stored["item"].update(source_sha256=sha256(source), target_sha256=sha256(target))
    copy_path = tmp_path / "geval.json"
    copy_path.write_text(json.dumps(stored))
    fixture = load_fixture(copy_path, _data_with(tmp_path / "data", stored, source, target))
    prompt = fixture["calls"][0]["messages"][-1]["content"]
    assert f"\n{source}\n" in prompt and f"\n{target}\n" in prompt and "{{source}}" not in prompt
    assert fixture["item"]["source"] == source and fixture["item"]["target"] == target


def test_a_fixture_without_its_data_says_which_file_it_needs(tmp_path):
    path = next(p for p in FIXTURES if p.stem == "geval")
    with pytest.raises(ReplayDataMissing, match="shared data folder not found"):
        load_fixture(path, tmp_path / "absent")
    with pytest.raises(ReplayDataMissing, match="summedits/samsum.jsonl not found"):
        load_fixture(path, tmp_path)
    _data_with(tmp_path, load_stored(path), "x", "y").joinpath("summedits/samsum.jsonl").write_text("{}\n")
    with pytest.raises(ReplayDataMissing, match="row 'samsum_train_13681548_5' not found"):
        load_fixture(path, tmp_path)
