"""What a call costs, for every backend: the prices given (``--price-in/--price-out``, ``Config.price_in`` and
``price_out``, US dollars per million tokens), else LiteLLM's maintained price map where it knows the model, else
unknown, with the reason (``Usage.cost_note``), never a guess.

LiteLLM is an optional extra: its price map is the JSON file the installed ``litellm`` package ships
(``model_prices_and_context_window_backup.json``), read once, without importing LiteLLM itself (seconds of
start-up). No hand-written table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from halluscope.records import Usage

PRICE_MAP_FILE = "model_prices_and_context_window_backup.json"
HINT = "--price-in/--price-out set one (US dollars per million tokens)"


@dataclass(frozen=True)
class Prices:
    """US dollars per million prompt (``input``) and completion (``output``) tokens."""

    input: float
    output: float

    def cost(self, usage: Usage) -> float:
        return (usage.prompt_tokens * self.input + usage.completion_tokens * self.output) / 1e6


@lru_cache(maxsize=1)
def litellm_price_map() -> dict[str, Any] | None:
    """LiteLLM's price map (model name -> prices per token) from the installed package; None without LiteLLM."""
    spec = find_spec("litellm")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / PRICE_MAP_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _per_million(entry: Any) -> Prices | None:
    if not isinstance(entry, dict):
        return None
    try:
        return Prices(float(entry["input_cost_per_token"]) * 1e6, float(entry["output_cost_per_token"]) * 1e6)
    except (KeyError, TypeError, ValueError):
        return None


def map_prices(model: str, price_map: dict[str, Any]) -> Prices | None:
    """The model's prices in the map: its name as given, else without a ``provider/`` or ``litellm:`` prefix."""
    names = [model, model.removeprefix("litellm:")]
    names.append(names[-1].split("/", 1)[1] if "/" in names[-1] else names[-1])
    for name in dict.fromkeys(names):
        prices = _per_million(price_map.get(name))
        if prices is not None:
            return prices
    return None


def priced(usage: Usage, models: Sequence[str], given: Prices | None = None, local: bool = False) -> Usage:
    """``usage`` of calls to a model (``models``: its names, configured and served) with its ``cost_usd`` (from
    ``given`` prices, else the backend's own, else LiteLLM's map), or with ``cost_note`` saying why the cost is
    unknown. Usage with no call is returned as it is."""
    if usage.calls == 0:
        return usage
    if usage.prompt_tokens <= 0 and usage.completion_tokens <= 0:
        return usage.model_copy(update={"cost_usd": None, "cost_note": "the model reported no token counts"})
    if given is not None:
        return usage.model_copy(update={"cost_usd": given.cost(usage), "cost_note": None})
    if usage.cost_usd is not None:
        return usage
    model = models[0] if models else "the model"
    if local:
        note = "a local model has no price per token; --price-in/--price-out set one"
        return usage.model_copy(update={"cost_note": note})
    price_map = litellm_price_map()
    if price_map is None:
        note = f"no price list: LiteLLM's price map comes with pip install 'halluscope[litellm]'; {HINT}"
        return usage.model_copy(update={"cost_note": note})
    prices = next((p for p in (map_prices(m, price_map) for m in dict.fromkeys(models)) if p is not None), None)
    if prices is None:
        return usage.model_copy(update={"cost_note": f"no price for {model!r} in LiteLLM's price map; {HINT}"})
    return usage.model_copy(update={"cost_usd": prices.cost(usage), "cost_note": None})
