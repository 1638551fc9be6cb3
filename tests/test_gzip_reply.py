"""A compressed reply is capped on its decoded bytes while it is decoded: a gzip bomb (a few hundred KB on the
wire, tens of MB inflated) costs the reply cap, not its inflated size. The request asks for no compression."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import tracemalloc
import zlib

import pytest

import halluscope.llm.openai_compat as openai_compat
from halluscope.llm import GenerateParams, LLMError, ReplyTooLargeError
from tests.test_backends_openai import MSGS, backend

BOMB_BYTES = 64 * 2**20


class _CompressedBody:
    """A loopback endpoint that answers every POST with ``body`` sent under ``encoding`` (ignoring the request's
    Accept-Encoding, as a misbehaving proxy would) and records the request heads."""

    def __init__(self, body: bytes, encoding: str) -> None:
        self.body, self.encoding = body, encoding
        self.heads: list[bytes] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    more = conn.recv(65536)
                    if not more:
                        break
                    data += more
                head, _, rest = data.partition(b"\r\n\r\n")
                self.heads.append(head)
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                while len(rest) < length:
                    rest += conn.recv(65536)
                try:
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: "
                        + self.encoding.encode()
                        + b"\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(self.body)
                        + self.body
                    )
                except OSError:
                    pass  # the client stopped reading: what a capped reader does

    def close(self) -> None:
        self.sock.close()


def _bomb() -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b'{"choices": [{"message": {"content": "' + b" " * (2**20 - 38)
    out = [z.compress(block)]
    zeros = b" " * 2**20
    for _ in range(BOMB_BYTES // 2**20 - 1):
        out.append(z.compress(zeros))
    return b"".join(out) + z.flush()


async def test_a_gzip_bomb_is_refused_on_its_decoded_size_with_bounded_memory() -> None:
    bomb = _bomb()
    assert len(bomb) < 2**20 < BOMB_BYTES  # well under the cap on the wire
    server = _CompressedBody(bomb, "gzip")
    tracemalloc.start()
    try:
        with pytest.raises(ReplyTooLargeError) as err:
            await backend(server.url, max_retries=0).generate(MSGS, GenerateParams())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        server.close()
    cap = openai_compat.MAX_RESPONSE_BYTES
    assert err.value.unit == "bytes" and cap < err.value.size <= cap + 1
    assert "decoded" in str(err.value)
    assert peak < 3 * cap, f"peak {peak / 2**20:.1f} MiB while reading a {BOMB_BYTES / 2**20:.0f} MiB bomb"
    assert b"accept-encoding: identity" in server.heads[0].lower()


@pytest.mark.parametrize(
    "encoding, compress", [("gzip", gzip.compress), ("deflate", zlib.compress), ("x-gzip", gzip.compress)]
)
async def test_a_small_compressed_reply_is_still_read(encoding, compress) -> None:
    body = {
        "choices": [{"message": {"role": "assistant", "content": "OK " * 1000}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 1},
    }
    server = _CompressedBody(compress(json.dumps(body).encode()), encoding)
    try:
        completion = await backend(server.url, max_retries=0).generate(MSGS, GenerateParams())
    finally:
        server.close()
    assert completion.text == "OK " * 1000


async def test_an_encoding_that_cannot_be_capped_is_refused() -> None:
    server = _CompressedBody(b"\x00" * 64, "br")
    try:
        with pytest.raises(LLMError, match="Content-Encoding"):
            await backend(server.url, max_retries=0).generate(MSGS, GenerateParams())
    finally:
        server.close()
