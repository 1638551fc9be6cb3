"""``halluscope reproduce PAPER``: run a seed paper's main evaluation protocol with the configured model and put
the paper's published numbers beside ours (``reproduce.json`` + ``reproduce.md``).

- :mod:`.papers`: the published numbers, kept as small validated JSON files (``paper_results/*.json``);
- :mod:`.builders`: resumable builders of the evaluation sets (montage lies, perturbations, injections);
- :mod:`.spec`: rows, metrics, the protocol and the run's context; :mod:`.table`: our value per (row, metric)
  from the row's bench results; :mod:`.running`: the runner (one resumable bench run per row); :mod:`.render`:
  markdown and terminal output; :mod:`.core` re-exports them all (the old path);
- :mod:`.protocols`: the five protocols (``dove``, ``dcr``, ``final``, ``longdoc``, ``probe``).
"""

from halluscope.bench.reproduce.core import (
    REPRODUCE_JSON,
    REPRODUCE_MD,
    Metric,
    Protocol,
    ReproduceContext,
    ReproduceError,
    Row,
    render_markdown,
    render_terminal,
    run_reproduce,
)
from halluscope.bench.reproduce.papers import PAPERS, PaperNumber, PaperResults, load_paper_results
from halluscope.bench.reproduce.protocols import PROTOCOLS, get_protocol

__all__ = [
    "PAPERS",
    "PROTOCOLS",
    "REPRODUCE_JSON",
    "REPRODUCE_MD",
    "ReproduceContext",
    "Metric",
    "PaperNumber",
    "PaperResults",
    "Protocol",
    "ReproduceError",
    "Row",
    "get_protocol",
    "load_paper_results",
    "render_markdown",
    "render_terminal",
    "run_reproduce",
]
