"""A reply over the size cap is refused while it is read, never sent back in the repair request, and stored once
on the report: its first characters and its size."""

from __future__ import annotations

import json
import socket
import threading

import pytest

import halluscope.llm.openai_compat as openai_compat
from halluscope.llm import LLM, FakeModel, GenerateParams, ReplyTooLargeError, track_calls
from halluscope.llm.client import REFUSED_EXCERPT_CHARS
from halluscope.methods import get_method
from halluscope.text.parsing import MAX_REPLY_CHARS
from tests.test_backends_openai import MSGS, ScriptedServer, backend

HUGE = "{" + "x" * (MAX_REPLY_CHARS * 5)  # a 1 MB reply
GOOD = '{"score": 4, "reason": "ok"}'


def _report_for(replies: list[str]):
    llm = LLM(FakeModel(replies), cache=None)
    return get_method("geval", llm=llm).check("The cat sat on the mat.", "A cat sat on a mat.")


def test_an_oversize_reply_is_unscored_and_stored_once_cut() -> None:
    report = _report_for([HUGE, HUGE])
    assert report.score is None
    assert "exceeds the 200000-character limit" in (report.unscored_reason or "")
    first, repair = report.calls
    assert first.reply_size == len(HUGE) and first.reply_size_unit == "characters"
    assert first.reply == HUGE[:REFUSED_EXCERPT_CHARS]
    echoed = repair.messages[-2]
    assert echoed["role"] == "assistant" and len(echoed["content"]) < REFUSED_EXCERPT_CHARS + 200
    assert f"{len(HUGE)} characters in all" in echoed["content"]
    assert len(report.model_dump_json()) < 20_000  # was three full copies: 15 MB for a 5 MB reply


def test_the_repair_after_an_oversize_reply_can_still_score() -> None:
    report = _report_for([HUGE, GOOD])
    assert report.score is not None
    assert report.calls[0].reply_size == len(HUGE) and report.calls[1].reply_size is None


def test_a_reply_at_the_cap_is_still_parsed() -> None:
    padded = GOOD + " " * (MAX_REPLY_CHARS - len(GOOD))
    assert _report_for([padded]).score is not None


async def test_the_refused_reply_is_not_cached(tmp_path) -> None:
    from halluscope.llm import ResponseCache

    fake = FakeModel([HUGE, "small"])
    llm = LLM(fake, cache=ResponseCache(tmp_path / "c.sqlite"))
    with track_calls() as log, pytest.raises(ReplyTooLargeError):
        await llm.generate(MSGS)
    assert log.calls[0].reply_size == len(HUGE)
    assert (await llm.generate(MSGS)).text == "small"  # asked again, not served from the cache


async def test_a_body_over_the_byte_limit_is_refused_from_its_content_length(monkeypatch) -> None:
    monkeypatch.setattr(openai_compat, "MAX_RESPONSE_BYTES", 10_000)
    body = {"choices": [{"message": {"role": "assistant", "content": "y" * 20_000}}]}
    with ScriptedServer([(200, body, {})]) as server:
        with pytest.raises(ReplyTooLargeError) as err:
            await backend(server.url, max_retries=2).generate(MSGS, GenerateParams())
    assert err.value.unit == "bytes" and err.value.size > 20_000
    assert len(server.requests) == 1  # refused, not retried


class _EndlessBody:
    """An endpoint that answers with a chunked body that never ends: only a reader that stops can return."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.stop = threading.Event()
        self.sent = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
        chunk = b'{"choices": [{"message": {"content": "' + b"z" * 65536
        try:
            while not self.stop.is_set():
                conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.sent += len(chunk)
        except OSError:
            pass  # the client hung up: what a reader that stops does
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


async def test_an_endless_body_is_refused_while_reading() -> None:
    server = _EndlessBody()
    try:
        with pytest.raises(ReplyTooLargeError) as err:
            await backend(server.url, max_retries=0).generate(MSGS, GenerateParams())
    finally:
        server.close()
    assert err.value.unit == "bytes"
    assert openai_compat.MAX_RESPONSE_BYTES < err.value.size <= openai_compat.MAX_RESPONSE_BYTES + 2**17
    assert "reading stopped" in str(err.value)


def test_call_records_of_normal_replies_carry_no_size() -> None:
    report = _report_for([GOOD])
    assert [c.reply_size for c in report.calls] == [None]
    assert json.loads(report.model_dump_json())["calls"][0]["reply"] == GOOD
