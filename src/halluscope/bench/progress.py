"""The progress bar of a bench run's long steps (scoring the items, asking a judge): description, bar, done/total,
time spent and time left; disabled with ``--no-progress``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress


def progress_bar(enabled: bool) -> Progress:
    """A rich progress display (on standard error's console), hidden when ``enabled`` is false."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        disable=not enabled,
        transient=False,
    )
