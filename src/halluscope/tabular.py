"""Tables in and out: ``evaluate(df_or_rows)`` -> a pandas DataFrame, and ``halluscope check --input pairs.csv
--output results.parquet`` (JSONL, CSV or parquet either way), resumable after a crash.

One result row per pair: the pair's own columns, then :data:`RESULT_COLUMNS` - ``score``, ``label``,
``unscored_reason``, ``findings`` (each with its kind, description, target ``spans`` and source ``evidence``,
offsets and text, ``evidence_relation``, and ``fix``, ``fix_verified``, ``fix_probability``), ``n_findings``, the
method and model, and the usage (``calls``, ``prompt_tokens``, ``completion_tokens``, ``cache_hits``,
``cost_usd``, ``elapsed_s``). A pair that cannot be checked (e.g. an empty source) gets an unscored row with the
reason, never a dropped row. In CSV and parquet files
``findings`` is JSON text (one cell); in JSONL and DataFrames it is a list of dicts. A CSV writes every list cell
(a source given as chunks) as JSON, the form its input reads, so a results file can be checked again as input
(its old result columns are then replaced).

Resuming a file run: every finished row is appended (and flushed) to ``<output>.partial.jsonl`` the moment it
is done; the first line of that file pins the run (the input's SHA-256, columns, method, options, model,
prompts, threshold). A re-run with the same settings skips the rows already there, so a run killed at any
point (even ``kill -9``) loses nothing and repeats nothing but the rows that were in flight (whose finished
LLM calls the response cache makes free); a different run is refused instead of mixed in. The final file is
written (atomically) in input order once every row is done, and the partial file is then removed.

pandas (and pyarrow for parquet) come with ``pip install 'halluscope[dataframe]'``; JSONL needs neither.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from halluscope.config import Config
from halluscope.records import Report

if TYPE_CHECKING:
    import pandas as pd

    from halluscope.methods.base import Method

USAGE_COLUMNS = ("calls", "prompt_tokens", "completion_tokens", "cache_hits", "cost_usd")
RESULT_COLUMNS = (
    "score",
    "label",
    "unscored_reason",
    "n_findings",
    "findings",
    "method",
    "model",
    *USAGE_COLUMNS,
    "elapsed_s",
)
FORMATS = (".jsonl", ".csv", ".parquet")
SOURCE_COLUMNS = ("source", "retrieved_contexts", "retrieval_context", "contexts", "context")
"""Source column names tried in order when none is named: halluscope's, RAGAS's (``retrieved_contexts``; older
RAGAS ``contexts``) and DeepEval's (``retrieval_context``). A cell may hold one text or a list of chunks."""
TARGET_COLUMNS = ("target", "response", "actual_output", "answer")
"""Target column names tried in order when none is named: halluscope's, RAGAS's (``response``; older RAGAS
``answer``) and DeepEval's (``actual_output``). The question (``user_input``, ``input``) is kept, not checked."""
PARTIAL_SUFFIX = ".partial.jsonl"
MAX_INPUT_BYTES = 256 * 2**20
"""Largest input table, 256 MiB: its size on disk, and for parquet also its uncompressed size. A larger one is
refused before it is read (:class:`TableError`, exit 2 on the CLI): all its rows are held in memory at once."""


class TableError(ValueError):
    """A table that cannot be read or written as asked (missing column, unknown format, different run)."""


def _pandas() -> Any:
    try:
        import pandas as pd
    except ImportError as exc:
        raise TableError("DataFrames, CSV and parquet need pandas: pip install 'halluscope[dataframe]'") from exc
    return pd


def resolve_columns(columns: Sequence[Any], source: str | None, target: str | None, where: str = "") -> tuple[str, str]:
    """The source and target column names: the ones given, else the first of :data:`SOURCE_COLUMNS` /
    :data:`TARGET_COLUMNS` present (so a RAGAS or DeepEval table works unchanged)."""
    present = [str(c) for c in columns]
    chosen = []
    for name, given, known in (("source", source, SOURCE_COLUMNS), ("target", target, TARGET_COLUMNS)):
        if given is not None:
            if present and given not in present:
                raise TableError(f"{where}no {name} column {given!r}; columns: {', '.join(present)}")
            chosen.append(given)
            continue
        found = next((c for c in known if c in present), None)
        if found is None:
            if present:
                raise TableError(
                    f"{where}no {name} column: expected one of {', '.join(known)} (or name it); "
                    f"columns: {', '.join(present)}"
                )
            found = known[0]
        chosen.append(found)
    return chosen[0], chosen[1]


def source_cell(value: Any) -> Any:
    """A table cell as a source: a list (or tuple, or the array parquet gives back) of chunks becomes a list;
    anything else is passed on as it is (a bad value becomes an unscored row, with the reason)."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if type(value).__name__ == "ndarray" and getattr(value, "ndim", 0) == 1:
        return list(value.tolist())
    return value


def _evidence_dict(e: Any) -> dict[str, Any]:
    item = {
        "text": e.text,
        "relation": e.relation,
        "start": e.span.start if e.span else None,
        "end": e.span.end if e.span else None,
    }
    if e.chunk is not None:
        item.update(
            chunk=e.chunk,
            chunk_start=e.chunk_span.start if e.chunk_span else None,
            chunk_end=e.chunk_span.end if e.chunk_span else None,
        )
    return item


def findings_of(report: Report, source: Any, target: str) -> list[dict[str, Any]]:
    """The report's findings as plain dicts: spans and evidence with offsets and the text they cover (and, for a
    source given as chunks, each evidence's ``chunk`` with its ``chunk_start``/``chunk_end`` inside it), the
    evidence's relation to the flagged text, and the shown fix with its re-verification."""
    out = []
    for f in report.findings:
        out.append(
            {
                "kind": f.kind,
                "description": f.description,
                "spans": [{"start": s.start, "end": s.end, "text": s.of(target)} for s in f.target_spans],
                "evidence": [_evidence_dict(e) for e in f.evidence],
                "evidence_relation": f.evidence_relation,
                "fix": f.fix,
                "fix_verified": f.fix_verified,
                "fix_probability": f.fix_probability,
            }
        )
    return out


def result_row(report: Report, source: str, target: str) -> dict[str, Any]:
    """The :data:`RESULT_COLUMNS` of one report."""
    usage = report.usage
    findings = findings_of(report, source, target) if isinstance(target, str) else []
    return {
        "score": report.score,
        "label": report.label,
        "unscored_reason": report.unscored_reason,
        "n_findings": len(findings),
        "findings": findings,
        "method": report.method,
        "model": report.model,
        "calls": usage.calls,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cache_hits": usage.cache_hits,
        "cost_usd": usage.cost_usd,
        "elapsed_s": round(report.elapsed_s, 6),
    }


async def score_pairs(
    method: Method, items: Sequence[tuple[Any, Any, Any]], concurrency: int, threshold: float | None = None
) -> AsyncIterator[tuple[Any, Report]]:
    """``(key, Report)`` for each ``(key, source, target)`` as it finishes (any order), at most ``concurrency``
    at a time. Bad input (empty or non-text) becomes an unscored Report; nothing is dropped."""
    from halluscope.methods.base import InputError

    queue: asyncio.Queue[tuple[Any, Any, Any]] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)
    done: asyncio.Queue[tuple[Any, Report]] = asyncio.Queue()

    async def worker() -> None:
        while True:
            try:
                key, source, target = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            try:
                report = await method.acheck(source, target)
            except InputError as exc:
                report = Report(method=method.name, model=method.model_name, unscored_reason=f"bad input: {exc}")
            report = method.decide(report, threshold)
            await done.put((key, report))

    workers = [asyncio.ensure_future(worker()) for _ in range(max(1, min(concurrency, len(items))))]
    try:
        for _ in range(len(items)):
            get = asyncio.ensure_future(done.get())
            while not get.done():  # a worker that crashed (a bug, not a bad pair) must not leave us waiting
                finished, _ = await asyncio.wait([get, *workers], return_when=asyncio.FIRST_COMPLETED)
                for w in finished:
                    if w is not get and not w.cancelled() and w.exception() is not None:
                        get.cancel()
                        raise cast(BaseException, w.exception())
                workers = [w for w in workers if not w.done()]
            yield get.result()
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


def _method(
    method: str | Method | None, model: str | None, config: Config | None, llm: Any, options: dict[str, Any]
) -> Method:
    """The named method built with these settings, or ``method`` itself when it is already a Method."""
    from halluscope.methods.named import build_method

    return build_method(method, model=model, config=config, llm=llm, options=options)


def _is_method(method: Any) -> bool:
    from halluscope.methods.base import Method

    return isinstance(method, Method)


def _rows_of(data: Any) -> tuple[list[Any], list[dict[str, Any]], Any]:
    """(index labels, row dicts, the input as a DataFrame or None)."""
    pd = _pandas()
    if isinstance(data, pd.DataFrame):
        return list(data.index), data.to_dict("records"), data
    rows = [dict(r) for r in data]
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise TableError(f"row {i} is a {type(row).__name__}, not a mapping of column to value")
    return list(range(len(rows))), rows, None


async def aevaluate(
    data: Any,
    source: str | None = None,
    target: str | None = None,
    method: str | Method | None = None,
    model: str | None = None,
    *,
    config: Config | None = None,
    llm: Any = None,
    threshold: float | None = None,
    concurrency: int | None = None,
    citations: str | None = None,
    uncited: str = "flag",
    **options: Any,
) -> pd.DataFrame:
    """Check every row of ``data`` (a DataFrame, or an iterable of dicts) and return a DataFrame: the input's
    columns and index, then :data:`RESULT_COLUMNS`. ``source``/``target`` name the columns to compare (default:
    the first present of :data:`SOURCE_COLUMNS` / :data:`TARGET_COLUMNS`, so RAGAS's ``retrieved_contexts`` /
    ``response`` and DeepEval's ``retrieval_context`` / ``actual_output`` work as they are); a source cell may
    be a list of chunks. ``method`` is a method name (built with ``model``/``config``/``llm``/options) or a
    ready Method.

    When a target carries citation markers, or ``citations`` names a marker style, each row's citations are also
    checked against its chunks (``uncited``: ``flag``, ``check`` or ``ignore``) and the result has the
    :data:`~halluscope.citation_columns.CITATION_COLUMNS` too (:mod:`halluscope.citation_columns`)."""
    from halluscope.citation_columns import CITATION_COLUMNS, carries_markers, check_options

    pd = _pandas()
    check_options(citations, uncited)
    index, rows, frame = _rows_of(data)
    columns = list(frame.columns) if frame is not None else list(dict.fromkeys(k for r in rows for k in r))
    source, target = resolve_columns(columns if rows else [], source, target)
    clash = [c for c in RESULT_COLUMNS if c in columns]
    if len(clash) == len(RESULT_COLUMNS):  # a results file fed back as input: its old results are replaced
        columns = [c for c in columns if c not in RESULT_COLUMNS and c not in CITATION_COLUMNS]
        rows = [{c: row.get(c) for c in columns} for row in rows]
        frame = None if frame is None else frame[columns]
    elif clash:
        raise TableError(f"the input already has result column(s) {clash}; rename or drop them first")
    if threshold is not None and not _is_method(method):
        if "threshold" in options and options["threshold"] != threshold:
            raise TableError(
                f"threshold={threshold} and the option threshold={options['threshold']} disagree: they are one setting"
            )
        options["threshold"] = threshold  # the method's own threshold option, where it has one: one setting
    m = _method(method, model, config, llm, options)
    items: list[tuple[int, Any, Any]] = [
        (i, source_cell(row.get(source)), row.get(target)) for i, row in enumerate(rows)
    ]
    reports: dict[int, Report] = {}
    concurrency = concurrency or m.config.max_concurrency
    async for i, report in score_pairs(m, items, concurrency, threshold):
        reports[i] = report
    result_columns = list(RESULT_COLUMNS)
    extra: dict[int, dict[str, Any]] = {i: {} for i in reports}
    if citations is not None or any(carries_markers(target_, citations) for _, _, target_ in items):
        result_columns += CITATION_COLUMNS
        reports, extra = await _cite_rows(m, items, reports, citations, uncited, concurrency)
    results = {i: {**result_row(reports[i], items[i][1], items[i][2]), **extra[i]} for i in reports}
    out = pd.DataFrame([results[i] for i in range(len(rows))], columns=result_columns, index=index)
    base = frame if frame is not None else pd.DataFrame(rows, columns=columns, index=index)
    return pd.concat([base, out], axis=1)


async def _cite_rows(
    method: Method,
    items: Sequence[tuple[Any, Any, Any]],
    reports: dict[int, Report],
    style: str | None,
    uncited: str,
    concurrency: int,
) -> tuple[dict[int, Report], dict[int, dict[str, Any]]]:
    """Each row's report with its citation check added, and its citation columns (at most ``concurrency`` rows
    at a time)."""
    from halluscope.citation_columns import add_citation_columns

    slots = asyncio.Semaphore(max(1, concurrency))

    async def one(i: int, source: Any, target: Any) -> tuple[Report, dict[str, Any]]:
        async with slots:
            return await add_citation_columns(method, reports[i], source, target, style, uncited)

    done = await asyncio.gather(*(one(i, source, target) for i, source, target in items))
    return {i: r for (i, _, _), (r, _) in zip(items, done)}, {i: c for (i, _, _), (_, c) in zip(items, done)}


def evaluate(
    data: Any,
    source: str | None = None,
    target: str | None = None,
    method: str | Method | None = None,
    model: str | None = None,
    *,
    config: Config | None = None,
    llm: Any = None,
    threshold: float | None = None,
    concurrency: int | None = None,
    citations: str | None = None,
    uncited: str = "flag",
    **options: Any,
) -> pd.DataFrame:
    """:func:`aevaluate` from synchronous code; also works inside a running event loop (a notebook)."""
    from halluscope.sync import run_sync

    return run_sync(
        aevaluate(
            data,
            source,
            target,
            method,
            model,
            config=config,
            llm=llm,
            threshold=threshold,
            concurrency=concurrency,
            citations=citations,
            uncited=uncited,
            **options,
        )
    )


# ---- files ---------------------------------------------------------------------------------------------


def table_format(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise TableError(f"{path}: unknown table format {suffix or '(none)'}; use one of {', '.join(FORMATS)}")
    return suffix


def _refuse_large(path: Path, fmt: str, max_bytes: int) -> None:
    """:class:`TableError` when the table is over ``max_bytes`` on disk or, for parquet, uncompressed."""
    size = path.stat().st_size
    if size <= max_bytes and fmt == ".parquet":
        try:
            import pyarrow.parquet as pq

            meta = pq.ParquetFile(path).metadata
            size = max(size, sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)))
        except ImportError:
            pass  # pandas says so when it reads the file
        except Exception as exc:  # pyarrow's errors have no common base class
            raise TableError(f"{path}: cannot read as parquet: {exc}") from exc
    if size > max_bytes:
        raise TableError(
            f"{path} is {size / 2**20:,.1f} MiB{' uncompressed' if fmt == '.parquet' else ''}, over the "
            f"{max_bytes / 2**20:,.0f} MiB an input table may hold (its rows are all held in memory): split it "
            "into parts and check each"
        )


def read_table(path: str | Path, max_bytes: int | None = MAX_INPUT_BYTES) -> list[dict[str, Any]]:
    """The rows of a JSONL, CSV or parquet file, as dicts (missing values as None); a file over ``max_bytes``
    (:data:`MAX_INPUT_BYTES`; None = no limit) is refused before it is read."""
    path = Path(path)
    fmt = table_format(path)
    if not path.is_file():
        raise TableError(f"input file not found: {path}")
    if max_bytes is not None:
        _refuse_large(path, fmt, max_bytes)
    if fmt == ".jsonl":  # the bench's reader: names the line of bad JSON or bad UTF-8
        from halluscope.bench.datasets import DatasetError, read_jsonl_lines

        try:
            return [row for _, row in read_jsonl_lines(path)]
        except DatasetError as exc:
            raise TableError(str(exc)) from exc
    pd = _pandas()
    try:
        frame = pd.read_csv(path, keep_default_na=False, dtype=str) if fmt == ".csv" else pd.read_parquet(path)
    except ImportError as exc:
        raise TableError(f"reading parquet needs pyarrow: pip install 'halluscope[dataframe]' ({exc})") from exc
    except Exception as exc:  # pandas' parser errors have no common base class
        raise TableError(f"{path}: cannot read as {fmt[1:]}: {exc}") from exc
    return [{k: (None if _is_missing(v) else v) for k, v in row.items()} for row in frame.to_dict("records")]


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def write_table(path: str | Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    """Write ``rows`` (in order) to ``path`` in its format, atomically (a temporary file, then a rename)."""
    path = Path(path)
    fmt = table_format(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if fmt == ".jsonl":
        with tmp.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps({c: row.get(c) for c in columns}, ensure_ascii=False) + "\n")
    else:
        pd = _pandas()
        flat = [{c: _flat_cell(c, row.get(c), fmt) for c in columns} for row in rows]
        frame = pd.DataFrame(flat, columns=columns)
        try:
            frame.to_csv(tmp, index=False) if fmt == ".csv" else frame.to_parquet(tmp, index=False)
        except ImportError as exc:
            raise TableError(f"writing parquet needs pyarrow: pip install 'halluscope[dataframe]' ({exc})") from exc
    os.replace(tmp, path)


def _flat_cell(column: str, value: Any, fmt: str) -> Any:
    """A cell as a CSV or parquet file holds it: ``findings`` as JSON text; in a CSV every list or dict as JSON
    text too (a source given as chunks, a RAGAS ``retrieved_contexts``), the form ``--input`` reads back."""
    if column == "findings" or (fmt == ".csv" and isinstance(value, (list, tuple, dict))):
        return json.dumps(value, ensure_ascii=False)
    return value


class PartialResults:
    """``<output>.partial.jsonl``: the identity line, then one ``{"row": i, "result": {...}}`` per finished row."""

    def __init__(self, output: Path):
        self.path = output.with_name(output.name + PARTIAL_SUFFIX)

    def load(self, identity: dict[str, Any]) -> dict[int, dict[str, Any]]:
        """Finished rows by input position; claims the file for ``identity`` when there is none. A line cut
        short by a crash is dropped (the file is rewritten without it); another run's file is refused."""
        if not self.path.is_file():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"identity": identity}, ensure_ascii=False) + "\n", encoding="utf-8")
            return {}
        lines = self.path.read_text(encoding="utf-8").splitlines()
        try:
            old = json.loads(lines[0])["identity"] if lines else None
        except (json.JSONDecodeError, KeyError, TypeError):
            old = None
        if old != json.loads(json.dumps(identity)):
            differ = [k for k in identity if not isinstance(old, dict) or old.get(k) != identity[k]]
            raise TableError(
                f"{self.path} holds a different run (differs in: {', '.join(differ) or 'header'}); "
                "delete it or choose another --output"
            )
        done: dict[int, dict[str, Any]] = {}
        good, bad = [lines[0]], 0
        for line in lines[1:]:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                done[int(record["row"])] = dict(record["result"])
                good.append(line)
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                bad += 1
        if bad:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text("".join(line + "\n" for line in good), encoding="utf-8")
            os.replace(tmp, self.path)
            print(
                f"warning: dropped {bad} unreadable line(s) from {self.path} (an interrupted write); "
                "those rows will be redone",
                file=sys.stderr,
            )
        return done

    def open(self) -> TextIO:
        return self.path.open("a", encoding="utf-8")

    @staticmethod
    def append(fh: TextIO, row: int, result: dict[str, Any]) -> None:
        fh.write(json.dumps({"row": row, "result": result}, ensure_ascii=False) + "\n")
        fh.flush()

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_INT_RESULTS = ("n_findings", "calls", "prompt_tokens", "completion_tokens", "cache_hits")
_FLOAT_RESULTS = ("score", "cost_usd", "elapsed_s")


def _result_of_output_row(row: dict[str, Any]) -> dict[str, Any]:
    """The :data:`RESULT_COLUMNS` of a row read back from a finished output file (CSV cells come back as text)."""
    out: dict[str, Any] = {}
    for c in RESULT_COLUMNS:
        value = row.get(c)
        if value == "" or _is_missing(value):
            value = None
        if value is not None and c in _INT_RESULTS:
            value = int(float(value))
        elif value is not None and c in _FLOAT_RESULTS:
            value = float(value)
        elif c == "findings":
            value = json.loads(value) if isinstance(value, str) else (list(value) if value is not None else [])
        out[c] = value
    return out


def _cell_key(value: Any) -> str:
    return json.dumps(source_cell(value), ensure_ascii=False, default=str)


def _kept_from_output(
    output_path: Path, rows: list[dict[str, Any]], source: str, target: str, method: Method
) -> dict[int, dict[str, Any]]:
    """``--retry-unscored`` after a finished run: the scored rows of the existing output, by position. The output
    must hold the same pairs in the same order, checked by the same method and model; else it is refused."""
    if not output_path.is_file():
        return {}
    old = read_table(output_path, max_bytes=None)  # this tool's own output: the input's rows plus their results
    if len(old) != len(rows):
        raise TableError(f"{output_path} has {len(old)} rows, the input {len(rows)}: not this input's results")
    kept: dict[int, dict[str, Any]] = {}
    for i, (new, prev) in enumerate(zip(rows, old)):
        same = all(_cell_key(new.get(c)) == _cell_key(_json_list_cell(prev.get(c))) for c in (source, target))
        if not same:
            raise TableError(f"{output_path} row {i} holds another pair than the input's: not this input's results")
        if prev.get("method") != method.name or (prev.get("model") or None) != method.model_name:
            raise TableError(
                f"{output_path} row {i} was checked by {prev.get('method')} ({prev.get('model')}), "
                f"not {method.name} ({method.model_name}); choose another --output"
            )
        try:
            result = _result_of_output_row(prev)
        except (ValueError, TypeError) as exc:
            raise TableError(f"{output_path} row {i}: cannot read its results back ({exc})") from None
        if result["score"] is not None:
            kept[i] = result
    return kept


def _json_list_cell(value: Any) -> Any:
    """A CSV cell holding a JSON list of strings (a source given as chunks) as that list; else the cell."""
    if isinstance(value, str) and value.startswith("["):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        if isinstance(parsed, list) and parsed and all(isinstance(x, str) for x in parsed):
            return parsed
    return value


async def check_file(
    method: Method,
    input_path: str | Path,
    output_path: str | Path,
    *,
    source: str | None = None,
    target: str | None = None,
    threshold: float | None = None,
    concurrency: int | None = None,
    progress: bool = True,
    retry_unscored: bool = False,
    on_row: Callable[[int, Report], None] | None = None,
) -> dict[str, Any]:
    """Check every row of ``input_path`` and write ``output_path`` (see the module docstring); returns a
    summary: rows, newly checked, resumed, kept, scored, inconsistent, unscored, mean score, and the usage of
    the rows checked by this call (``calls``, tokens, ...) beside that of every row (``total_calls``, ...).

    A source cell may be a list of chunks (JSONL or parquet), or in a CSV a JSON list of strings.
    ``retry_unscored``: check again only the rows left unscored, by an interrupted run (its partial file) or by a
    finished one (the existing ``output_path``, which must hold this input's pairs); scored rows are kept."""
    input_path, output_path = Path(input_path), Path(output_path)
    table_format(output_path)
    rows = read_table(input_path)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    source, target = resolve_columns(columns, source, target, f"{input_path}: ")
    if table_format(input_path) == ".csv":
        for row in rows:
            row[source] = _json_list_cell(row.get(source))
    clash = [c for c in RESULT_COLUMNS if c in columns]
    if len(clash) == len(RESULT_COLUMNS):  # a results file fed back as input: its old results are replaced
        columns = [c for c in columns if c not in RESULT_COLUMNS]
        rows = [{c: row.get(c) for c in columns} for row in rows]
    elif clash:
        raise TableError(f"{input_path} already has result column(s) {clash}; rename or drop them first")
    identity = {
        "input_sha256": _sha256(input_path),
        "source_column": source,
        "target_column": target,
        "method": method.name,
        "method_options": method.options(),
        "model": method.model_name,
        "prompt_version": method.prompt_version,
        "threshold": threshold,
    }
    partial = PartialResults(output_path)
    fresh = not partial.path.is_file()
    kept = _kept_from_output(output_path, rows, source, target, method) if retry_unscored and fresh else {}
    done = partial.load(identity)
    if retry_unscored:
        done = {i: r for i, r in done.items() if r.get("score") is not None}
        if kept:
            done.update(kept)
        with partial.path.open("w", encoding="utf-8") as fh:  # the partial file holds exactly what is kept
            fh.write(json.dumps({"identity": identity}, ensure_ascii=False) + "\n")
            for i in sorted(done):
                PartialResults.append(fh, i, done[i])
    resumed = len(done)
    pending = [(i, source_cell(row.get(source)), row.get(target)) for i, row in enumerate(rows) if i not in done]
    now: list[dict[str, Any]] = []
    if pending:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            disable=not progress,
        )
        with partial.open() as fh, bar:
            task = bar.add_task(f"{method.name} on {input_path.name}", total=len(rows), completed=resumed)
            async for i, report in score_pairs(
                method, pending, concurrency or method.config.max_concurrency, threshold
            ):
                result = result_row(report, rows[i].get(source), rows[i].get(target))
                PartialResults.append(fh, i, result)  # one writer: lines never interleave
                done[i] = result
                now.append(result)
                bar.advance(task)
                if on_row is not None:
                    on_row(i, report)
    results = [{**rows[i], **done[i]} for i in range(len(rows))]
    write_table(output_path, results, columns + list(RESULT_COLUMNS))
    partial.remove()
    scored = [r["score"] for r in results if r["score"] is not None]
    usage_keys = ("calls", "prompt_tokens", "completion_tokens", "cache_hits")
    totals = {c: sum(r[c] or 0 for r in now) for c in usage_keys}
    all_totals = {f"total_{c}": sum(r[c] or 0 for r in results) for c in usage_keys}
    costs = [r["cost_usd"] for r in now if r["calls"]]
    return {
        "rows": len(rows),
        "checked": len(pending),
        "resumed": resumed,
        "kept": len(kept),
        "scored": len(scored),
        "inconsistent": sum(r["label"] == "inconsistent" for r in results),
        "unscored": len(rows) - len(scored),
        "mean_score": sum(scored) / len(scored) if scored else None,
        **totals,
        **all_totals,
        "cost_usd": sum(costs) if costs and all(c is not None for c in costs) else None,
        "output": str(output_path),
    }


def rows_of_pairs(pairs: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
    """``[(source, target), ...]`` as rows for :func:`evaluate`."""
    return [{"source": s, "target": t} for s, t in pairs]
