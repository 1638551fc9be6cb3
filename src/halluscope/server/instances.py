"""A bounded LRU of method instances keyed by (method name, canonical JSON of its options); options that
validate to the same values share one instance.

Every instance shares the service's one LLM client; what an instance builds for itself (probe's ``judges``
clients) is handed to ``on_evict`` when no key refers to the instance any more, so the service can close it:
2,000 distinct option sets cost at most ``size`` instances and their connections (the unbounded dict this
replaces grew the server to 1.1 GB and 5,045 open files; evicted judges' clients once kept 327 SQLite handles).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from halluscope.methods import Method

MAX_OPTIONS_CHARS = 16_384


class OptionsTooLarge(ValueError):
    pass


def options_key(name: str, options: dict[str, Any]) -> tuple[str, str]:
    text = json.dumps(options, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    if len(text) > MAX_OPTIONS_CHARS:
        raise OptionsTooLarge(f"options take {len(text)} characters as JSON; at most {MAX_OPTIONS_CHARS}")
    return name, text


class MethodCache:
    def __init__(
        self,
        size: int,
        build: Callable[[str, dict[str, Any]], Method],
        on_evict: Callable[[Method], None] | None = None,
    ):
        self.size = max(1, size)
        self._build = build
        self._on_evict = on_evict
        self._items: OrderedDict[tuple[str, str], Method] = OrderedDict()  # by the options as sent
        self._validated: dict[tuple[str, str], tuple[str, str]] = {}  # options as sent -> as validated
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, name: str, options: dict[str, Any]) -> Method:
        """The instance for ``name`` and ``options``, built (and validated) on a miss. Construction errors
        (unknown method, bad options) propagate and nothing is cached."""
        key = options_key(name, options)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
        method = self._build(name, options)  # outside the lock: may resolve prompt files
        validated = options_key(name, method.options())
        with self._lock:
            # options that validate to the same values ({"top_k": 3} and {"top_k": "3"}, or a default spelled
            # out) share one instance
            same = next((m for k, m in self._items.items() if self._validated.get(k) == validated), None)
            built = method
            method = self._items.setdefault(key, same or method)
            self._validated[key] = validated
            self._items.move_to_end(key)
            released = [] if method is built else [built]  # built for nothing: an equal instance was kept
            while len(self._items) > self.size:
                evicted, instance = self._items.popitem(last=False)
                self._validated.pop(evicted, None)
                if all(m is not instance for m in self._items.values()):  # no other spelling still uses it
                    released.append(instance)
        if self._on_evict is not None:
            for instance in released:
                self._on_evict(instance)
        return method
