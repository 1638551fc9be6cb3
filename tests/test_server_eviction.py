"""Evicted method instances release what they built (probe judges' clients, their cache connections), but
never while one of their checks still runs; judges share the main client's response cache."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")
pytest.importorskip("prometheus_client", reason="server extra not installed: pip install 'halluscope[server]'")

from halluscope import methods
from halluscope.config import Config
from halluscope.llm import LLM, FakeModel, ResponseCache
from halluscope.llm.client import LLM as LLMClass
from halluscope.methods import Method, get_method
from halluscope.options import MethodOptions
from halluscope.records import Example, Report
from halluscope.server import ServerSettings
from halluscope.server.service import Service


def _open_files_named(name: str) -> int:
    fd_dir = "/proc/self/fd"
    if not os.path.isdir(fd_dir):
        pytest.skip("needs /proc to count open files")
    count = 0
    for fd in os.listdir(fd_dir):
        try:
            count += os.readlink(os.path.join(fd_dir, fd)).endswith(name)
        except OSError:
            continue
    return count


def test_probe_judges_share_the_main_cache_and_evicted_ones_are_closed(tmp_path, monkeypatch) -> None:
    closed: list[tuple[str, bool]] = []
    real_close = LLMClass.close

    def spy(self, *, cache: bool = True) -> None:
        closed.append((self.name, cache))
        real_close(self, cache=cache)

    monkeypatch.setattr(LLMClass, "close", spy)
    config = Config(base_url="http://127.0.0.1:9/v1", cache=True, cache_path=tmp_path / "cache.sqlite")
    shared = LLM(FakeModel(default="x"), cache=ResponseCache(tmp_path / "cache.sqlite"))
    service = Service(
        config, ServerSettings(jobs_db=tmp_path / "jobs.sqlite", method_cache_size=2, allowed_models=("*",)), shared
    )  # every judge name allowed here
    before = _open_files_named("cache.sqlite")
    for i in range(40):
        method = service.methods.get("probe", {"judges": [f"judge-{i}-a", f"judge-{i}-b"]})
        judges = method.judge_llms()  # built on first use, as a check would
        assert all(j.cache is shared.cache for j in judges)
    assert _open_files_named("cache.sqlite") == before  # was one more SQLite handle per judge and instance
    assert len(service.methods) == 2
    assert len(closed) == 2 * 38  # both judges of every evicted instance
    assert all(cache is False for _, cache in closed)  # the shared cache stays open ...
    assert shared.cache.get("missing") is None  # ... and usable
    service.stop()


def test_a_probe_built_without_a_client_closes_its_own() -> None:
    method = get_method("probe", llm=None, config=Config(base_url="http://127.0.0.1:9/v1", cache=False))
    own = method.llm
    method.close()
    assert method._llm is None and own is not None
    method.close()  # twice is harmless


async def test_an_evicted_instance_is_closed_only_after_its_running_check(tmp_path, monkeypatch) -> None:
    gate = threading.Event()
    closes: list[str] = []

    class Held(Method):
        name = "_held"
        uses_llm = False

        async def run(self, source: str, target: str) -> Report:
            await asyncio.to_thread(gate.wait, 60)
            return Report(method=self.name, score=1.0)

        def close(self) -> None:
            closes.append(self.opts_key)

    class Options(MethodOptions):
        tag: int = 0

    Held.Options = Options
    Held.opts_key = property(lambda self: f"tag={self.opts.tag}")  # type: ignore[attr-defined]
    monkeypatch.setitem(methods._REGISTERED, "_held", Held)
    service = Service(Config(cache=False), ServerSettings(jobs_db=tmp_path / "jobs.sqlite", method_cache_size=1))
    service.ensure_started()
    try:
        first = service.methods.get("_held", {"tag": 1})
        running = asyncio.create_task(
            service.run_check(first, Example(id="0", source="a", target="b"), "check", lambda r: r.score)
        )
        for _ in range(3000):  # until the check runs on its worker (a state, not a guessed time)
            if service._uses.get(id(first)):
                break
            await asyncio.sleep(0.01)
        assert service._uses.get(id(first)) == 1
        service.methods.get("_held", {"tag": 2})  # evicts the first while its check runs
        assert closes == []
        gate.set()
        assert await running == 1.0
        assert closes == ["tag=1"]
        service.methods.get("_held", {"tag": 3})  # evicts an idle one: closed at once
        assert closes == ["tag=1", "tag=2"]
    finally:
        gate.set()
        service.stop()
