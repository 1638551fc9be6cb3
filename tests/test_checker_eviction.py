"""Loaded encoder checkers are evicted least recently used first (at most ``MAX_LOADED_CHECKERS``), as the
service evicts method instances: a server naming many checkers does not keep every model in memory."""

from __future__ import annotations

import sys
import types

import halluscope.methods.encoder_models as encoder_models


class _Model:
    def __init__(self, name):
        self.name = name
        self.config = types.SimpleNamespace(max_position_embeddings=64, id2label={0: "x", 1: "y"}, num_labels=2)

    def to(self, device):
        return self

    def eval(self):
        return self


def _fake_transformers(monkeypatch, loaded):
    def from_pretrained(name):
        loaded.append(name)
        return _Model(name)

    auto = types.SimpleNamespace(from_pretrained=from_pretrained)
    fake = types.ModuleType("transformers")
    fake.AutoTokenizer = types.SimpleNamespace(from_pretrained=lambda name: types.SimpleNamespace(model_max_length=64))
    fake.AutoModelForSequenceClassification = auto
    utils = types.ModuleType("transformers.utils")
    utils.logging = types.SimpleNamespace(disable_progress_bar=lambda: None)
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_available=lambda: False)
    monkeypatch.setitem(sys.modules, "transformers", fake)
    monkeypatch.setitem(sys.modules, "transformers.utils", utils)
    monkeypatch.setitem(sys.modules, "torch", torch)


def test_loaded_checkers_are_bounded_and_evicted_least_recently_used(monkeypatch, tmp_path):
    loaded: list[str] = []
    _fake_transformers(monkeypatch, loaded)
    monkeypatch.setattr(encoder_models, "_LOADED", type(encoder_models._LOADED)())
    monkeypatch.setattr(encoder_models, "MAX_LOADED_CHECKERS", 2)
    names = [str(tmp_path / n) for n in ("a", "b", "c")]
    first = encoder_models.load_checker("nli", names[0])
    encoder_models.load_checker("nli", names[1])
    assert encoder_models.load_checker("nli", names[0]) is first  # a hit: no second load, and now most recent
    encoder_models.load_checker("nli", names[2])  # evicts b, the least recently used
    assert list(k[1] for k in encoder_models._LOADED) == [names[0], names[2]]
    encoder_models.load_checker("nli", names[1])  # loaded again
    assert loaded == [names[0], names[1], names[2], names[1]]
    assert len(encoder_models._LOADED) == 2
