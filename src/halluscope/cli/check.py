"""``halluscope check``: score one target against one source (one text or a list of chunks), or every row of a
table.

Exit codes, like a linter's (``docs/cli.md``):

* 0 - consistent: scored, at or above the threshold, no finding (with ``--input``: every row so);
* 1 - inconsistent: a finding, or a score under the threshold (with ``--input``: any such row, or a mean score
  under ``--fail-under``);
* 2 - bad usage or set-up: a wrong flag, an unreadable file, a model that cannot be built; nothing was checked;
* 3 - could not score: the pair (with ``--input``: some row, and no row inconsistent) got no score, e.g. the
  model's endpoint was unreachable; the reason is printed.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from halluscope.cli.citations import CitationsOpt, UncitedOpt, add_citations
from halluscope.cli.common import (
    NO_FLAGS,
    InputFileError,
    ModelFlags,
    OptionOpt,
    check_fraction,
    check_option_pairs,
    check_output_file,
    fail,
    model_options,
    parse_options,
    read_text_input,
)
from halluscope.records import Evidence, Finding, Report, Usage

if TYPE_CHECKING:
    from halluscope.methods.base import Method

EXIT_CONSISTENT = 0
EXIT_INCONSISTENT = 1
EXIT_USAGE = 2
EXIT_UNSCORED = 3
FORMATS = ("text", "json", "jsonl")


def exit_code(report: Report, fail_under: float | None = None) -> int:
    """The exit code of one checked pair (see the module docstring)."""
    if report.score is None:
        return EXIT_UNSCORED
    if report.label == "inconsistent" or (fail_under is not None and report.score < fail_under):
        return EXIT_INCONSISTENT
    return EXIT_CONSISTENT


def batch_exit_code(summary: dict[str, Any], fail_under: float | None = None) -> int:
    """The exit code of a ``--input`` run: 1 when any row is inconsistent (or the mean score of the scored rows is
    under ``fail_under``), else 3 when any row could not be scored, else 0."""
    mean = summary["mean_score"]
    if summary["inconsistent"] or (fail_under is not None and mean is not None and mean < fail_under):
        return EXIT_INCONSISTENT
    if summary["unscored"]:
        return EXIT_UNSCORED
    return EXIT_CONSISTENT


def number(value: float | int | None, digits: int = 3) -> str:
    """A value for the terminal: integers as integers (``claims=3``), other numbers to ``digits`` places."""
    if value is None:
        return "-"
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return f"{value:.{digits}f}"


def line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of character ``offset`` in ``text`` (as linters and editors count)."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Texts:
    """The texts a report indexes into, with the names to print for them."""

    def __init__(
        self,
        source: str,
        target: str,
        source_name: str = "source",
        target_name: str = "target",
        chunks: list[str] | None = None,
        chunk_names: list[str] | None = None,
    ):
        self.source, self.target = source, target
        self.source_name, self.target_name = source_name, target_name
        self.chunks = chunks
        self.chunk_names = chunk_names

    def evidence_where(self, ev: Evidence) -> str:
        """``file:line:col`` (or ``chunk N line L``) where evidence lies in the source; ``not located`` if nowhere."""
        if ev.span is None:
            return "not located in the source"
        if ev.chunk is not None and ev.chunk_span is not None and self.chunks and ev.chunk < len(self.chunks):
            line, col = line_col(self.chunks[ev.chunk], ev.chunk_span.start)
            if self.chunk_names:
                return f"{self.chunk_names[ev.chunk]}:{line}:{col} (chunk {ev.chunk})"
            return f"chunk {ev.chunk}, line {line}:{col}"
        line, col = line_col(self.source, ev.span.start)
        return f"{self.source_name}:{line}:{col}"


def finding_lines(n: int, f: Finding, texts: Texts) -> list[str]:
    """One finding as a linter prints it: ``target:line:col: kind: "flagged text"``, then the reason, the quoted
    evidence with where it lies, the confidence where the method gives one, and a suggested fix where it makes one."""
    spans = sorted(f.target_spans, key=lambda s: s.start)
    if spans:
        line, col = line_col(texts.target, spans[0].start)
        where = f"{texts.target_name}:{line}:{col}"
        flagged = " … ".join(_one_line(s.of(texts.target), 200) for s in spans)
        head = f'{where}: {f.kind}: "{flagged}"'
    else:
        head = f"{texts.target_name}: {f.kind} (not located in the text)"
    confidence = getattr(f, "confidence", None)
    if confidence is not None:
        head += f" [confidence {confidence:.2f}]"
    out = [f"{n}. {head}", f"   reason: {_one_line(f.description, 600)}"]
    not_mentioned = getattr(f, "evidence_relation", None) == "not_mentioned"
    if not_mentioned:
        out.append("   evidence: not mentioned in the source")
    for ev in f.evidence:
        what = "closest passage" if not_mentioned and ev.relation == "related" else f"evidence ({ev.relation})"
        out.append(f'   {what} at {texts.evidence_where(ev)}: "{_one_line(ev.text, 600)}"')
    if not f.evidence and f.kind == "unsupported" and not not_mentioned:
        out.append("   evidence: not mentioned in the source")
    if f.fix:  # on its own line only: a finding's description never repeats it
        out.append(f"   fix: {_one_line(f.fix, 600)}{_verified(f)}")
    elif getattr(f, "fix_candidates", None):
        out.append("   fix: no verified fix")
    return out


def _verified(f: Finding) -> str:
    """`` (verified, P(supported) 0.93)`` after a re-verified fix, `` (verified)`` without a probability."""
    if not getattr(f, "fix_verified", False):
        return ""
    p = getattr(f, "fix_probability", None)
    return " (verified)" if p is None else f" (verified, P(supported) {p:.2f})"


def claim_lines(report: Report, texts: Texts) -> list[str]:
    """Every judged claim, passing ones too: where it is, its verdict, and where its evidence lies (its chunk)."""
    out = []
    for v in report.verdicts:
        spans = sorted(v.claim.target_spans, key=lambda s: s.start)
        where = (
            f"{texts.target_name}:{':'.join(map(str, line_col(texts.target, spans[0].start)))}"
            if spans
            else texts.target_name
        )
        out.append(f'{where}: {v.label}: "{_one_line(v.claim.text, 200)}"')
        for ev in v.evidence:
            out.append(f'   {ev.relation} at {texts.evidence_where(ev)}: "{_one_line(ev.text, 200)}"')
        if not v.evidence and v.label == "unsupported":
            out.append("   not mentioned in the source")
    return out


def usage_words(u: Usage, elapsed_s: float) -> str:
    """The cost line in words: calls, tokens (those the model reused from its prompt cache named apart), replies
    from halluscope's cache, the price (or why it is unknown) and the time."""
    if u.cost_usd is not None:
        cost = f", ${u.cost_usd:.6f}"
    elif u.calls:
        cost = f", cost unknown ({u.cost_note})" if u.cost_note else ", cost unknown"
    else:
        cost = ""
    return (
        f"{u.calls} LLM calls, {u.prompt_tokens}+{u.completion_tokens} tokens{u.cached_note()}, "
        f"{u.cache_hits} replies from cache{cost}, {elapsed_s:.2f}s"
    )


def report_text(report: Report, texts: Texts, claims: bool = False, show_details: bool = False) -> str:  # noqa: C901 - the plain report, one branch per optional line
    """The whole terminal report: findings first (as a linter lists them), then with ``claims`` every claim and
    its evidence, then the verdict line, the claims' counts and the cost; ``show_details`` adds the method's numbers
    (its sub-scores: Z, alpha, beta, ...), which the JSON always holds."""
    lines: list[str] = []
    for n, f in enumerate(report.findings, 1):
        lines.extend(finding_lines(n, f, texts))
    unscored = [v for v in report.verdicts if v.label == "unscored"]
    for v in unscored:
        if v.claim.target_spans:
            line, col = line_col(texts.target, v.claim.target_spans[0].start)
            lines.append(f'{texts.target_name}:{line}:{col}: unscored: "{_one_line(v.claim.text, 200)}"')
        else:
            lines.append(f'{texts.target_name}: unscored: "{_one_line(v.claim.text, 200)}"')
        lines.append(f"   reason: {_one_line(v.reason, 600)}")
    if claims and report.verdicts:
        lines.extend(["", "claims:"] if lines else ["claims:"])
        lines.extend(claim_lines(report, texts))
    details = report.details or {}
    if details.get("improved") and details.get("diff"):  # `improve`: its verified rewrite is the suggested fix
        lines.append(f"suggested fix (verified rewrite, round {details.get('best_round')}):")
        lines.extend(
            f"   {line}"
            for line in str(details["diff"]).splitlines()
            if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
        )
    if lines:
        lines.append("")
    score = "unscored" if report.score is None else number(report.score)
    verdict = f"{report.method} ({report.model or 'no LLM'}): score {score}"
    if report.threshold is not None:
        verdict += f", threshold {number(report.threshold)}"
    if report.label:
        verdict += f" -> {report.label}"
    if report.findings:
        verdict += f" ({len(report.findings)} finding{'s' if len(report.findings) != 1 else ''})"
    lines.append(verdict)
    if report.unscored_reason:
        lines.append(f"could not score: {report.unscored_reason}")
    if "citation_recall" in report.subscores:  # a cited answer: how well its citations hold, in words
        recall, precision = report.subscores["citation_recall"], report.subscores.get("citation_precision")
        lines.append(
            f"  citations: {number(recall)} of the cited sentences are supported by what they cite (recall), "
            f"{'n/a' if precision is None else number(precision)} of the citations are needed (precision)"
        )
    if show_details and report.subscores:
        lines.append("  " + ", ".join(f"{k}={number(v)}" for k, v in report.subscores.items()))
    if isinstance(report.details.get("ran"), list):  # an ensemble: which members ran, which the cascade skipped
        skipped = report.details.get("skipped") or []
        lines.append(
            f"  members run: {', '.join(report.details['ran']) or 'none'}; "
            f"skipped: {', '.join(skipped) if skipped else 'none'}"
        )
    if report.verdicts:
        counts: dict[str, int] = {}
        for v in report.verdicts:
            counts[v.label] = counts.get(v.label, 0) + 1
        lines.append(
            f"  claims: {len(report.verdicts)} (" + ", ".join(f"{n} {label}" for label, n in counts.items()) + ")"
        )
    lines.append(usage_words(report.usage, report.elapsed_s))
    return "\n".join(lines)


def print_report(report: Report, target: str, texts: Texts | None = None) -> None:
    typer.echo(report_text(report, texts or Texts("", target)))


def read_contexts(paths: list[str]) -> tuple[list[str], list[str]]:
    """``--context`` files -> (chunks, a name per chunk). Each file is one chunk, except a ``.json`` file, which
    holds a JSON list of chunks (named ``file.json[i]``)."""
    chunks: list[str] = []
    names: list[str] = []
    for path in paths:
        text = read_text_input(path, "context")
        if path.endswith(".json"):
            try:
                data = json.loads(text)
            except ValueError as exc:
                raise InputFileError(f"context file {path} is not valid JSON: {exc}") from None
            if not isinstance(data, list) or not data or not all(isinstance(c, str) for c in data):
                raise InputFileError(f"context file {path} must hold a JSON list of strings (the chunks)")
            chunks.extend(data)
            names.extend(f"{path}[{i}]" for i in range(len(data)))
        else:
            chunks.append(text)
            names.append(path)
    return chunks, names


@model_options()
def check_command(  # noqa: C901 - the check command's flags, each validated where it is read
    source: Annotated[str | None, typer.Option("--source", "-s", help="Source text file ('-' for stdin).")] = None,
    target: Annotated[
        str | None, typer.Option("--target", "-t", help="Target text file to check ('-' for stdin).")
    ] = None,
    context: Annotated[
        list[str] | None,
        typer.Option(
            "--context",
            "-c",
            help=(
                "Instead of --source: a retrieved chunk's file (repeat for each chunk), or a "
                ".json file holding a list of chunks; the evidence names its chunk."
            ),
        ),
    ] = None,
    method: Annotated[str | None, typer.Option("--method", help="Method name (see `halluscope methods`).")] = None,
    flags: ModelFlags = NO_FLAGS,
    option: OptionOpt = None,
    threshold: Annotated[
        float | None,
        typer.Option(
            help=(
                "Consistent when the score is at least this and there is no finding (default: the "
                "method's, see `halluscope methods`; the same setting as -o threshold=)."
            )
        ),
    ] = None,
    output_format: Annotated[
        str | None,
        typer.Option("--format", "-f", help="text (default), json (the full Report, indented) or jsonl (one line)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
    fail_under: Annotated[
        float | None,
        typer.Option(
            "--fail-under",
            help="Also exit 1 when the score (with --input: the mean score of the scored rows) is below this.",
        ),
    ] = None,
    html: Annotated[
        str | None,
        typer.Option("--html", help="Also write the web report (side-by-side, highlighted spans) to this file."),
    ] = None,
    input_file: Annotated[
        str | None,
        typer.Option(
            "--input", "-i", help="Check every row of this table (.jsonl, .csv or .parquet) instead of one pair."
        ),
    ] = None,
    output_file: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-O",
            help=(
                "With --input: write one result row per input row here "
                "(.jsonl, .csv or .parquet); resumes after a crash."
            ),
        ),
    ] = None,
    source_column: Annotated[
        str | None,
        typer.Option(
            "--source-column",
            help=(
                "With --input: the column holding the source (default: source, "
                "retrieved_contexts or retrieval_context; a cell may be a list of chunks)."
            ),
        ),
    ] = None,
    target_column: Annotated[
        str | None,
        typer.Option(
            "--target-column",
            help="With --input: the column holding the target (default: target, response or actual_output).",
        ),
    ] = None,
    retry_unscored: Annotated[
        bool,
        typer.Option(
            "--retry-unscored",
            help=(
                "With --input: check again only the rows left unscored in "
                "--output (or its partial file); keep the scored ones."
            ),
        ),
    ] = False,
    progress: Annotated[
        bool,
        typer.Option(
            "--progress/--no-progress",
            help="Show progress on a terminal: a spinner while one pair is checked, a progress bar with --input.",
        ),
    ] = True,
    show_details: Annotated[
        bool,
        typer.Option(
            "--details",
            help="Text output and --html: also show the method's own numbers (sub-scores such as Z, alpha, beta, k).",
        ),
    ] = False,
    claims: Annotated[
        bool,
        typer.Option(
            "--claims",
            help=(
                "Text output: also list every claim (passing ones too) with "
                "its verdict and where its evidence lies (its chunk)."
            ),
        ),
    ] = False,
    citations: CitationsOpt = None,
    uncited: UncitedOpt = "flag",
) -> None:
    """Check TARGET against SOURCE (or every row of --input into --output) and print the findings, score and cost.

    Exit status: 0 consistent, 1 inconsistent (a finding, or a score under the threshold), 2 bad usage,
    3 could not score. With --input: 1 if any row is inconsistent, else 3 if any row is unscored, else 0."""
    from halluscope.llm import LLMError
    from halluscope.methods import InputError
    from halluscope.methods.named import build_method

    if json_out:
        if output_format not in (None, "json"):
            raise fail(f"--json is --format json; it disagrees with --format {output_format}")
        output_format = "json"
    output_format = output_format or "text"
    if output_format not in FORMATS:
        raise fail(f"--format must be one of {', '.join(FORMATS)}, got {output_format!r}")
    check_option_pairs(option)  # before the pairing of --input/--output: `-o out.jsonl` is pointed to --output
    if source is not None and context:
        raise fail("give the source once: --source (one text) or --context (its chunks), not both")
    if input_file is not None or output_file is not None:
        if source is not None or target is not None or context:
            raise fail("use either --source/--context and --target (one pair) or --input/--output (a table), not both")
        if input_file is None or output_file is None:
            raise fail("--input and --output go together")
        if html:
            raise fail("--html checks one pair; with --input every row goes to --output")
    else:
        if retry_unscored:
            raise fail("--retry-unscored goes with --input/--output")
        if (source is None and not context) or target is None:
            raise fail(
                "give --source (or --context) and --target (one pair), or --input and --output (a table of pairs)"
            )
    stdin_readers = [source == "-", target == "-", *(c == "-" for c in context or [])]
    if sum(stdin_readers) > 1:
        raise fail("only one of --source/--context/--target can read standard input")
    check_fraction(threshold, "--threshold")
    check_fraction(fail_under, "--fail-under")
    check_output_file(html, "--html")
    chunks: list[str] | None = None
    chunk_names: list[str] | None = None
    if input_file is None:
        try:
            if context:
                chunks, chunk_names = read_contexts(context)
                src = ""
            else:
                src = read_text_input(cast(str, source), "source")  # both given: checked above
            tgt = read_text_input(cast(str, target), "target")
        except InputFileError as exc:
            raise fail(str(exc)) from exc
    config, concurrency = flags.config(), flags.concurrency
    options = parse_options(option)
    if threshold is not None:
        if "threshold" in options and options["threshold"] != threshold:
            raise fail(
                f"--threshold {threshold} and -o threshold={options['threshold']} are the same setting and "
                "disagree: give one"
            )
        options["threshold"] = threshold
    try:
        m = build_method(method, config=config, options=options)
    except (KeyError, TypeError, ValueError) as exc:
        raise fail(str(exc.args[0] if isinstance(exc, KeyError) else exc)) from exc
    if m.uses_llm:
        try:  # a backend that cannot be built is a set-up error, not an unscored pair
            m.llm  # noqa: B018
        except (LLMError, ValueError, OSError) as exc:  # OSError: e.g. a fake model's script file that is missing
            raise fail(str(exc)) from exc
    if input_file is not None:
        code = check_table(
            m,
            input_file,
            cast(str, output_file),
            source_column,
            target_column,
            threshold,
            concurrency,
            progress,
            retry_unscored,
            fail_under,
            output_format,
        )
        raise typer.Exit(code)
    try:
        with working(progress, f"checking with {m.name} ({m.model_name or 'no LLM'})"):
            report = m.check(chunks if chunks is not None else src, tgt)
    except (InputError, LLMError, ValueError) as exc:
        raise fail(str(exc)) from exc
    if chunks is not None:
        report = add_citations(report, m, chunks, tgt, citations, uncited)
        from halluscope.contexts import join_contexts

        src = join_contexts(chunks)[0]
    if html:
        from halluscope.report import write_html

        try:
            write_html(report, src, tgt, html, details=show_details)
        except OSError as exc:  # e.g. no permission: a clear refusal, not a traceback
            raise fail(f"--html {html}: cannot write the report: {exc.strerror or exc}") from exc
        typer.echo(f"wrote the web report to {html}", err=True)  # standard error: the report's JSON stays clean
    if output_format == "json":
        typer.echo(report.model_dump_json(indent=2))
    elif output_format == "jsonl":
        typer.echo(report.model_dump_json())
    else:
        if report.score is None and not report.verdicts and not report.findings:  # nothing was judged: one line
            raise fail(f"could not score: {report.unscored_reason}", code=EXIT_UNSCORED)
        names = {
            "source_name": "source" if source is None or source == "-" else source,
            "target_name": "target" if target is None or target == "-" else target,
        }
        texts = Texts(src, tgt, chunks=chunks, chunk_names=chunk_names, **names)
        typer.echo(report_text(report, texts, claims, show_details))
    raise typer.Exit(exit_code(report, fail_under))


def working(progress: bool, what: str) -> AbstractContextManager[Any]:
    """A spinner with ``what`` on standard error while one check runs: on a terminal only (``--no-progress``
    hides it), so piped output and JSON stay clean."""
    from rich.console import Console

    console = Console(stderr=True)
    if not progress or not console.is_terminal:
        return nullcontext()
    return console.status(what + "...")


def check_table(
    method: Method,
    input_file: str,
    output_file: str,
    source_column: str | None,
    target_column: str | None,
    threshold: float | None,
    concurrency: int | None,
    progress: bool,
    retry_unscored: bool = False,
    fail_under: float | None = None,
    output_format: str = "text",
) -> int:
    """``check --input/--output``: every row checked, resumably (see :mod:`halluscope.tabular`); prints the
    summary and returns the exit code."""
    from halluscope.llm import LLMError
    from halluscope.sync import run_sync
    from halluscope.tabular import TableError, check_file

    try:
        summary = run_sync(
            check_file(
                method,
                input_file,
                output_file,
                source=source_column,
                target=target_column,
                threshold=threshold,
                concurrency=concurrency,
                progress=progress,
                retry_unscored=retry_unscored,
            )
        )
    except (TableError, LLMError) as exc:
        raise fail(str(exc)) from exc
    code = batch_exit_code(summary, fail_under)
    if output_format != "text":
        typer.echo(json.dumps({**summary, "exit_code": code}, indent=2 if output_format == "json" else None))
        return code
    mean = "-" if summary["mean_score"] is None else f"{summary['mean_score']:.3f}"
    cost = "" if summary["cost_usd"] is None else f", ${summary['cost_usd']:.6f}"
    reused = summary["resumed"]
    typer.echo(
        f"wrote {summary['rows']} rows to {summary['output']} ({summary['checked']} checked now, "
        f"{reused} resumed): {summary['scored']} scored, {summary['unscored']} unscored, "
        f"{summary['inconsistent']} inconsistent; mean score {mean}"
    )
    earlier = (
        f"; {summary['total_calls']} LLM calls in all, counting the {reused} rows done before"
        if reused and summary["total_calls"] != summary["calls"]
        else ""
    )
    typer.echo(
        f"this run: {summary['calls']} LLM calls, {summary['prompt_tokens']}+{summary['completion_tokens']} "
        f"tokens, {summary['cache_hits']} replies from cache{cost}{earlier}"
    )
    if fail_under is not None and summary["mean_score"] is not None and summary["mean_score"] < fail_under:
        typer.echo(f"mean score {mean} is under --fail-under {fail_under}")
    return code
