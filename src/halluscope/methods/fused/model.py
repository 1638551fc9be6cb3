"""The fused verifier's fitted model: one readable JSON file, applied with plain Python and numpy.

A logistic regression on standardised claim features (:mod:`~halluscope.methods.fused.features`), fitted by
``halluscope fit-verifier`` (scikit-learn) and saved with everything needed to apply it without scikit-learn:

    value_j = clip(x_j, lo_j, hi_j)            the training range of feature j
    z       = sum_j coef_j (value_j - mean_j) / scale_j + intercept
    P(supported) = 1 / (1 + exp(-(a z + b)))   Platt calibration (a, b fitted out of fold; a = 1, b = 0: none)

The file holds the feature names, the standardisation, the coefficients by name, the intercept, the calibration,
the training summary (data, label rule, out-of-fold figures) and the format version.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.methods.fused.features import FEATURE_NAMES, ClaimFeatures

FORMAT = "halluscope.fused_verifier"
VERSION = 1
SHIPPED = "fused_verifier.json"
"""The file shipped inside the package (``halluscope/resources/``), used by ``-o verifier=fused``."""


class FusedModelError(ValueError):
    """A fused verifier file that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class FusedModel:
    """A fitted fused verifier (see the module docstring)."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    lo: tuple[float, ...]
    hi: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    calibration_a: float = 1.0
    calibration_b: float = 0.0
    training: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.features)
        unknown = [f for f in self.features if f not in FEATURE_NAMES]
        if unknown:
            raise FusedModelError(f"unknown feature(s) {', '.join(unknown)}; known: {', '.join(FEATURE_NAMES)}")
        for name in ("mean", "scale", "lo", "hi", "coef"):
            if len(getattr(self, name)) != n:
                raise FusedModelError(f"{name} has {len(getattr(self, name))} values for {n} features")
        values = [*self.mean, *self.scale, *self.lo, *self.hi, *self.coef, self.intercept]
        if not all(math.isfinite(v) for v in [*values, self.calibration_a, self.calibration_b]):
            raise FusedModelError("every number of a fused verifier must be finite")
        if any(s <= 0 for s in self.scale):
            raise FusedModelError("every scale must be positive")

    @property
    def uses_embeddings(self) -> bool:
        return "embedding_similarity" in self.features

    def logits(self, X: np.ndarray) -> np.ndarray:
        """The uncalibrated logit of each row of ``X`` (rows: claims; columns: :attr:`features`)."""
        x = np.clip(np.asarray(X, dtype=float), np.asarray(self.lo), np.asarray(self.hi))
        z = (x - np.asarray(self.mean)) / np.asarray(self.scale)
        return np.asarray(z @ np.asarray(self.coef) + self.intercept, dtype=float)

    def probabilities(self, X: np.ndarray) -> np.ndarray:
        """The calibrated P(supported) of each row of ``X``."""
        t = self.calibration_a * self.logits(X) + self.calibration_b
        return np.asarray(1.0 / (1.0 + np.exp(-np.clip(t, -50.0, 50.0))), dtype=float)

    def predict(self, claims: Sequence[ClaimFeatures]) -> list[float]:
        """P(supported) of each claim."""
        if not claims:
            return []
        return [float(p) for p in self.probabilities(np.array([c.vector(self.features) for c in claims]))]

    def weights(self) -> dict[str, float]:
        """The coefficient of each feature (on the standardised scale: comparable across features)."""
        return dict(zip(self.features, self.coef))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "features": list(self.features),
            "standardisation": {
                name: {"mean": m, "scale": s, "lo": lo, "hi": hi}
                for name, m, s, lo, hi in zip(self.features, self.mean, self.scale, self.lo, self.hi)
            },
            "coefficients": dict(zip(self.features, self.coef)),
            "intercept": self.intercept,
            "calibration": {"method": "platt", "a": self.calibration_a, "b": self.calibration_b},
            "training": self.training,
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "fused verifier") -> FusedModel:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise FusedModelError(f"{where}: not a fused verifier file (format {FORMAT!r} expected)")
        if data.get("version") != VERSION:
            raise FusedModelError(f"{where}: format version {data.get('version')!r}; this halluscope reads {VERSION}")
        try:
            names = [str(n) for n in data["features"]]
            std = data["standardisation"]
            coefs = data["coefficients"]
            calibration = data.get("calibration") or {}
            return cls(
                features=tuple(names),
                mean=tuple(float(std[n]["mean"]) for n in names),
                scale=tuple(float(std[n]["scale"]) for n in names),
                lo=tuple(float(std[n]["lo"]) for n in names),
                hi=tuple(float(std[n]["hi"]) for n in names),
                coef=tuple(float(coefs[n]) for n in names),
                intercept=float(data["intercept"]),
                calibration_a=float(calibration.get("a", 1.0)),
                calibration_b=float(calibration.get("b", 0.0)),
                training=dict(data.get("training") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, FusedModelError):
                raise FusedModelError(f"{where}: {exc}") from exc
            raise FusedModelError(f"{where}: malformed ({type(exc).__name__}: {exc})") from exc

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        return path


def load_model(path: str | Path | None = None) -> FusedModel:
    """The fused verifier in ``path``; the one shipped with the package when ``path`` is None or empty."""
    if not path:
        text = resources.files("halluscope").joinpath("resources", SHIPPED).read_text(encoding="utf-8")
        return FusedModel.from_json(json.loads(text), f"the shipped {SHIPPED}")
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise FusedModelError(f"cannot read the fused verifier {file}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise FusedModelError(f"{file}: not JSON ({exc.msg})") from exc
    return FusedModel.from_json(data, str(file))
