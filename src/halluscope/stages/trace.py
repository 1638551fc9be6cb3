"""``RunTrace``: what the stages of one check record for their method's report, passed along explicitly.

The claim pipeline makes one trace per check and hands it to the stages it calls: a decomposer that records gets
it through ``with_trace(trace)`` (a copy of the decomposer bound to this check), a verifier finds it on the
``Context`` it is given (``context.trace``; the pipeline puts it on every context it selects). The method reads
it back in ``aggregate`` / ``localize`` (``run.trace``) and ``finish``. No context variable: concurrent checks on
one method instance each have their own trace, and a stage used outside a check (``context.trace`` None)
records nothing.

Records are typed: ``trace.record(DceNotes)`` is this check's :class:`~halluscope.methods.dcr.DceNotes`, made
(``DceNotes()``) on first use; ``trace.get(DceNotes)`` is None when no stage recorded one.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

T = TypeVar("T")


class RunTrace:
    """One check's records, one per record type."""

    def __init__(self) -> None:
        self._records: dict[type[Any], Any] = {}

    def record(self, kind: type[T]) -> T:
        """This check's record of type ``kind``, made with ``kind()`` on first use."""
        if kind not in self._records:
            self._records[kind] = kind()
        return cast(T, self._records[kind])

    def get(self, kind: type[T]) -> T | None:
        """This check's record of type ``kind``, or None when no stage made one."""
        return cast("T | None", self._records.get(kind))


def bind_trace(stage: T, trace: RunTrace) -> T:
    """``stage`` bound to ``trace`` when it records into traces (it has ``with_trace``), else ``stage`` itself."""
    with_trace = getattr(stage, "with_trace", None)
    return cast(T, with_trace(trace)) if callable(with_trace) else stage
