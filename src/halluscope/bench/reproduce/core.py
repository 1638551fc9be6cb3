"""The reproduce engine: a protocol is a dataset (shared dev data, or a set built from it), a list of rows
(one halluscope method + options per row of the paper's table) and, per row, the metrics that map suite
results onto the paper's columns. :func:`run_reproduce` builds the data (resumably), runs one
:func:`~halluscope.bench.runner.run_bench` per row (each resumable, in ``<out>/rows/<row>/``), and puts the
paper's published number next to ours for every (row, metric), or the reason ours cannot be computed.

The engine is split by concern: :mod:`.spec` (rows, metrics, protocol, context), :mod:`.table` (the cells from
bench results), :mod:`.running` (:func:`run_reproduce`, :func:`run_row`) and :mod:`.render` (markdown, terminal);
this module keeps every name importable from its old path.
"""

from __future__ import annotations

from halluscope.bench.reproduce.render import (
    _cell,
    _level_text,
    _selection_text,
    coverage_cell,
    judge_cell,
    main_table,
    ours_cell,
    paper_cell,
    render_markdown,
    render_terminal,
    scored_cell,
    write_reproduce,
)
from halluscope.bench.reproduce.running import run_reproduce, run_row
from halluscope.bench.reproduce.spec import (
    REPRODUCE_JSON,
    REPRODUCE_MD,
    SUITE_NEEDS,
    Metric,
    Protocol,
    ReproduceContext,
    ReproduceError,
    Row,
    _opt,
    is_embedded,
    select_rows,
)
from halluscope.bench.reproduce.table import (
    _add,
    _all_unscored,
    _ci_json,
    _cost,
    _coverage,
    _metric_value,
    _node,
    _number_json,
    _paper_cell,
    _selection_usage,
    _usage,
)

__all__ = [
    "REPRODUCE_JSON",
    "REPRODUCE_MD",
    "SUITE_NEEDS",
    "ReproduceContext",
    "Metric",
    "Protocol",
    "ReproduceError",
    "Row",
    "_add",
    "_all_unscored",
    "_cell",
    "_ci_json",
    "_cost",
    "_coverage",
    "_level_text",
    "_metric_value",
    "_node",
    "_number_json",
    "_opt",
    "_paper_cell",
    "_selection_text",
    "_selection_usage",
    "_usage",
    "coverage_cell",
    "is_embedded",
    "judge_cell",
    "main_table",
    "ours_cell",
    "paper_cell",
    "render_markdown",
    "render_terminal",
    "run_reproduce",
    "run_row",
    "scored_cell",
    "select_rows",
    "write_reproduce",
]
