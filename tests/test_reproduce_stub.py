"""``halluscope reproduce dcr --sample 5`` and ``reproduce longdoc --sample 2`` on the shared dev data against an
OpenAI-compatible stub on loopback: every row that ran shows its coverage and the value counting every item (the
headline), with the value over the scored items beside it. The stub answers each request by the reply type its
JSON schema names, from the data the prompt fences, and garbles a fixed share of its replies (chosen by a hash
of the request), so some items are unscored and the two values differ."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.prompt_data import fenced

REPO = Path(__file__).resolve().parents[1]


def _numbers(text: str) -> list[int]:
    """The numbers of a numbered listing (``1. x`` or ``[1] x`` lines)."""
    return [int(n) for n in re.findall(r"^\[?(\d+)[\].]", text, re.MULTILINE)]


def stub_answer(messages: list[dict], title: str | None, digest: str) -> str:
    """A reply of the type ``title`` (None: free text) that reads the prompt's data; one request in six (by its
    hash) gets a reply no parser accepts."""
    roll = int(digest[:8], 16)
    if roll % 6 == 0:
        return "I would rather not say."
    good = roll % 3 != 0  # "consistent" two times in three
    if title is None:  # G-Eval's score-only form
        return str(1 + roll % 5)
    if title == "GevalReply":
        return json.dumps({"reason": "stub", "score": 1 + roll % 5})
    if title == "DceReply":
        ids = _numbers(fenced(messages, "sentences"))
        return json.dumps(
            {
                "sentences": [
                    {"id": i, "reason": "Consistent: stated." if (roll >> i) % 3 else "Inconsistent: not stated."}
                    for i in ids
                ],
                "is_consistent": good,
            }
        )
    if title == "DceSingleReply":
        return json.dumps(
            {"reason": "Consistent: stated." if good else "Inconsistent: not stated.", "is_consistent": good}
        )
    if title == "DceExcerptBatchReply":
        ids = _numbers(fenced(messages, "sentences"))
        return json.dumps({"results": [{"id": i, "reason": "Consistent: stated.", "is_consistent": True} for i in ids]})
    if title == "AmcReply":
        reasons = re.findall(r"^\d+\.\s*(.*)$", fenced(messages, "reasons"), re.MULTILINE)
        return json.dumps({"marks": [-1 if r.startswith("Inconsistent") else 1 for r in reasons]})
    if title == "RewritesReply":
        return json.dumps({"rewrites": []})
    if title == "ImprovedTextReply":
        return json.dumps({"improved_text": fenced(messages, "target")})
    if title == "FactsReply":
        listing = re.findall(r"^(\d+)\.\s*(.+)$", fenced(messages, "sentences"), re.MULTILINE)
        return json.dumps({"facts": [{"sentence": int(n), "fact": text} for n, text in listing]})
    if title in ("FactCheckReply", "FactJudgmentReply"):
        return json.dumps({"supported": good})
    return "no reply scripted for " + str(title)


class SchemaStub:
    """``POST /v1/chat/completions``: :func:`stub_answer` for the schema the request carries; counts requests."""

    def __init__(self) -> None:
        self.requests = 0
        self.by_type: dict[str, int] = {}
        lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = json.loads(body)
                fmt = request.get("response_format") or {}
                schema = (fmt.get("json_schema") or {}).get("schema") or fmt.get("schema") or {}
                title = schema.get("title")
                with lock:
                    stub.requests += 1
                    stub.by_type[str(title)] = stub.by_type.get(str(title), 0) + 1
                content = stub_answer(request["messages"], title, hashlib.sha256(body).hexdigest())
                payload = json.dumps(
                    {
                        "id": "stub",
                        "object": "chat.completion",
                        "model": request.get("model", "stub"),
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> SchemaStub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def reproduce(stub: SchemaStub, data_dir: Path, out: Path, *args: str) -> dict:
    env = {
        "HALLUSCOPE_CACHE": "false",
        "PATH": "/usr/bin:/bin",
        "HOME": str(out.parent),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO / "src") + ":" + str(REPO),
        "HALLUSCOPE_REPRODUCE_MODELS": str(out.parent / "none"),
    }
    cmd = [
        sys.executable,
        "-m",
        "halluscope",
        "reproduce",
        *args,
        "--base-url",
        stub.base_url,
        "--model",
        "stub",
        "--api-key",
        "x",
        "--data-dir",
        str(data_dir),
        "--output",
        str(out),
        "--bootstrap",
        "50",
        "--no-progress",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    return json.loads((out / "reproduce.json").read_text())


def every_row_headlines_all_items(result: dict) -> list[dict]:
    """The rows that ran, after checking each metric shows its coverage and a value counting every item (a column
    whose rows the builder did not make, e.g. an LLM rewrite under ``--builder no-llm``, says so instead)."""
    ran = [r for r in result["rows"] if r.get("n")]
    for rec in ran:
        for m in rec["metrics"]:
            ours = m["ours"]
            if ours is None and "not built" in (m["reason"] or ""):
                continue
            assert ours is not None, (rec["id"], m["key"], m["reason"])
            assert not ours.get("all_missing"), (rec["id"], m["key"])  # the headline counts every item
            cov = ours["coverage"]
            assert cov and 0 <= cov["scored"] <= cov["total"], (rec["id"], m["key"])
            if cov["scored"] < cov["total"]:
                assert ours.get("scored") is not None or cov["scored"] == 0, (rec["id"], m["key"])
    return ran


def test_reproduce_dcr_sample_5_shows_coverage_and_the_every_item_value(data_dir, tmp_path):
    with SchemaStub() as stub:
        result = reproduce(stub, data_dir, tmp_path / "dcr", "dcr", "--sample", "5")
    ran = every_row_headlines_all_items(result)
    assert {r["id"] for r in ran} == {"geval", "dcr", "improve", "improve_paragraph"}
    table = (tmp_path / "dcr" / "reproduce.md").read_text()
    assert "ours, all items" in table and "ours, scored items" in table and "coverage" in table
    assert any(r["n_unscored"] for r in ran)  # the stub's garbled replies left items unscored: both values shown
    partial = [m for r in ran for m in r["metrics"] if m["ours"]["coverage"]["scored"] < m["ours"]["coverage"]["total"]]
    assert partial and all("worst outcome" in (m["note"] or "") for m in partial)


def test_reproduce_longdoc_sample_2_shows_coverage_and_the_every_item_value(data_dir, tmp_path):
    with SchemaStub() as stub:
        result = reproduce(stub, data_dir, tmp_path / "longdoc", "longdoc", "--sample", "2", "--builder", "no-llm")
    ran = every_row_headlines_all_items(result)
    assert {"dcr", "dcr_w0", "dcr_w2", "factscore", "rouge"} <= {r["id"] for r in ran}
    shown = [m for r in ran for m in r["metrics"] if m["ours"] is not None]
    assert {m["key"] for m in shown} >= {
        "mean_original",
        "mean_added_source_sentence",
        "mean_original_w1",
        "mean_original_w0",
        "mean_original_w2",
    }
    originals = [m["ours"]["coverage"] for r in ran for m in r["metrics"] if m["key"] == "mean_original"]
    assert originals and all(c["total"] == 2 for c in originals)  # the two base summaries' original rows
    md = (tmp_path / "longdoc" / "reproduce.md").read_text()
    assert "(headline is over scored items" not in md
