"""Dataset loaders (on the real shared data), the generic JSONL format, and seeded subsampling."""

from __future__ import annotations

from collections import Counter

import pytest

from halluscope.bench.datasets import (
    DatasetError,
    load_dataset,
    read_examples,
    resolve_data_dir,
    sample_examples,
    write_examples,
)
from halluscope.records import Example, Span


def test_final_dev(data_dir):
    ds = load_dataset("final:dev", data_dir)
    assert ds.spec == "final:dev" and len(ds.examples) == 140
    ex = ds.examples[0]
    assert ex.source and ex.target and ex.split == "dev"
    assert all(e.descriptions is not None for e in ds.examples)
    assert all(e.label == (0 if e.descriptions else 1) for e in ds.examples)
    assert Counter(e.label for e in ds.examples) == {0: 112, 1: 28}
    assert load_dataset("final", data_dir).spec == "final:dev"


def test_summedits_all_domains_keep_splits(data_dir):
    ds = load_dataset("summedits", data_dir)
    assert len(ds.examples) == 2469
    assert {e.meta["domain"] for e in ds.examples} == {"news", "samsum", "scitldr", "sales_call"}
    assert {e.split for e in ds.examples} == {"evaluation", "test"}
    assert {e.label for e in ds.examples} == {0, 1}
    news = load_dataset("summedits:news", data_dir)
    assert len(news.examples) == 819 and {e.meta["domain"] for e in news.examples} == {"news"}
    two = load_dataset("summedits:news+samsum", data_dir)
    assert len(two.examples) == 819 + 664
    # the edits of one seed summary share a group
    assert news.examples[0].group == news.examples[1].group


def test_qags_and_squality(data_dir):
    qags = load_dataset("qags", data_dir)
    assert len(qags.examples) == 100
    assert all(0.0 <= e.human_score <= 1.0 and e.label is None for e in qags.examples)
    sq = load_dataset("squality:dev", data_dir)
    assert len(sq.examples) == 25 * 4
    assert len({e.group for e in sq.examples}) == 25
    assert all(e.label is None and e.descriptions is None for e in sq.examples)


def test_unknown_names_and_missing_folder_are_clear(tmp_path, data_dir):
    with pytest.raises(DatasetError, match="unknown dataset 'nope'"):
        load_dataset("nope", data_dir)
    with pytest.raises(DatasetError, match="unknown SummEdits domain"):
        load_dataset("summedits:podcasts", data_dir)
    with pytest.raises(DatasetError, match="data folder not found.*--data-dir"):
        load_dataset("final", tmp_path / "absent")
    with pytest.raises(DatasetError, match="dataset file not found"):
        load_dataset("final:test", data_dir)


def test_data_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HALLUSCOPE_DATA_DIR", str(tmp_path))
    assert resolve_data_dir() == tmp_path
    monkeypatch.setenv("HALLUSCOPE_DATA_DIR", str(tmp_path / "missing"))
    with pytest.raises(DatasetError, match="HALLUSCOPE_DATA_DIR"):
        resolve_data_dir()


def test_generic_jsonl_round_trip(tmp_path):
    examples = [
        Example(
            id="1",
            source="S.",
            target="T.",
            label=0,
            descriptions=["x"],
            gold_spans=[Span(start=0, end=1)],
            group="g",
            difficulty="easy",
            split="test",
            meta={"k": 1},
        ),
        Example(id="2", source="S.", target="U."),
    ]
    path = tmp_path / "mine.jsonl"
    write_examples(path, examples)
    assert read_examples(path) == examples
    ds = load_dataset(str(path))
    assert ds.name == "mine" and ds.examples == examples


def test_generic_jsonl_errors_name_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "source": "s", "target": "t"}\n{"id": "2", "source": "s"}\n')
    with pytest.raises(DatasetError, match="record 2: target"):
        read_examples(bad)
    bad.write_text('{"id": "1", "source": "s", "target": "t"}\n{not json\n')
    with pytest.raises(DatasetError, match=":2: not valid JSON"):
        read_examples(bad)
    bad.write_text('{"id": "1", "source": "s", "target": "t"}\n{"id": "1", "source": "s", "target": "t"}\n')
    with pytest.raises(DatasetError, match="duplicate example id"):
        read_examples(bad)
    bad.write_text('{"id": "1", "source": "s", "target": "t", "label": 2}\n')
    with pytest.raises(DatasetError, match="label"):
        read_examples(bad)


def _labelled(n_pos: int, n_neg: int, split: str, domain: str) -> list[Example]:
    return [
        Example(
            id=f"{split}-{domain}-{i}",
            source="s",
            target="t",
            label=int(i < n_pos),
            split=split,
            meta={"domain": domain},
        )
        for i in range(n_pos + n_neg)
    ]


def test_sample_is_stratified_seeded_and_keeps_order():
    items = _labelled(30, 70, "evaluation", "a") + _labelled(5, 95, "test", "a") + _labelled(50, 50, "test", "b")
    s1 = sample_examples(items, 10, seed=1)
    assert s1 == sample_examples(items, 10, seed=1)
    assert s1 != sample_examples(items, 10, seed=2)
    strata = Counter((e.split, e.meta["domain"], e.label) for e in s1)
    assert strata == {
        ("evaluation", "a", 1): 3,
        ("evaluation", "a", 0): 7,
        ("test", "a", 1): 1,
        ("test", "a", 0): 9,
        ("test", "b", 1): 5,
        ("test", "b", 0): 5,
    }
    positions = [items.index(e) for e in s1]
    assert positions == sorted(positions)
    assert len(sample_examples(items[:4], 10)) == 4  # a small stratum is kept whole


def test_sample_takes_whole_montage_groups():
    items = [
        Example(id=f"{g}-{d}", source="s", target="t", group=g, difficulty=d, label=int(d == "truth"))
        for g in "abcdef"
        for d in ("truth", "easy", "hard")
    ]
    picked = sample_examples(items, 2, seed=0)
    groups = Counter(e.group for e in picked)
    assert len(groups) == 2 and set(groups.values()) == {3}


def test_sample_size_must_be_positive():
    with pytest.raises(ValueError):
        sample_examples(_labelled(1, 1, "x", "y"), 0)


def test_non_utf8_jsonl_names_the_file_and_line(tmp_path):
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(
        b'{"id": "1", "source": "s", "target": "t"}\n'
        + '{"id": "2", "source": "café", "target": "t"}\n'.encode("latin-1")
    )
    with pytest.raises(DatasetError, match=r"latin1\.jsonl:2: not UTF-8 \(byte 0xe9 at column 27\)"):
        read_examples(bad)
    with pytest.raises(DatasetError, match="latin1.jsonl:2: not UTF-8"):
        load_dataset(str(bad))


def test_utf8_bom_and_blank_lines_are_accepted_and_lines_are_counted(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"id": "1", "source": "s", "target": "t"}\n\n{"id": "2", "source": "s"}\n')
    with pytest.raises(DatasetError, match=r"bom\.jsonl:3: record 2: target"):  # file line 3, second record
        read_examples(path)


@pytest.mark.parametrize("score", ["NaN", "Infinity", "-Infinity", "1e999", '"nan"', '"inf"'])
def test_non_finite_human_scores_are_refused_with_the_line(tmp_path, score):
    path = tmp_path / "scores.jsonl"
    path.write_text(
        '{"id": "1", "source": "s", "target": "t", "human_score": 0.5}\n'
        f'{{"id": "2", "source": "s", "target": "t", "human_score": {score}}}\n'
    )
    with pytest.raises(DatasetError, match=r"scores\.jsonl:2: human score .* finite"):
        read_examples(path)


def test_shared_loaders_name_the_line_of_a_bad_record(tmp_path):
    (tmp_path / "qags").mkdir()
    qags = tmp_path / "qags" / "cnndm_dev.jsonl"
    qags.write_text(
        '{"id": 1, "source": "s", "summary": "t", "consistency": 0.5}\n'
        '{"id": 2, "source": "s", "summary": "t", "consistency": NaN}\n'
    )
    with pytest.raises(DatasetError, match=r"cnndm_dev\.jsonl:2: human score is nan"):
        load_dataset("qags", tmp_path)
    qags.write_text('{"id": 1, "source": "s", "summary": "t"}\n')
    with pytest.raises(DatasetError, match=r"cnndm_dev\.jsonl:1: missing field 'consistency'"):
        load_dataset("qags", tmp_path)
    (tmp_path / "final").mkdir()
    final = tmp_path / "final" / "dev.jsonl"
    final.write_text('{"doc_id": 1, "text": "s", "summary": "t", "human_descriptions": 3}\n')
    with pytest.raises(DatasetError, match=r"dev\.jsonl:1: malformed record"):
        load_dataset("final:dev", tmp_path)
