"""Background jobs persisted in SQLite: they survive a restart (also ``kill -9``) and resume where they stopped.

Tables: ``jobs`` (one row per job, with its running counts), ``items`` (the job's examples, copied in at
submission so a job does not depend on a file that may change) and ``results`` (one row per finished item:
the whole Report JSON, or the error). A result and the job's counts are written in one transaction, so after
a crash the counts match the results. On start, jobs left ``running`` go back to ``queued``; a job runs only
the items that have no result, so nothing finished is computed again, and an item that was half-way reuses
the LLM replies already in the response cache (0 repeated calls for every reply that had arrived). An item
whose stored data cannot be read, or that was started ``job_item_attempts`` times without a result (each run
ended the server), is recorded unscored with the reason instead of being run, so no item stalls its job.

One server process per database: :class:`JobStore` holds an exclusive lock on ``<db>.lock``.

Several replicas share their jobs through Redis instead (``--jobs-url``): :mod:`.redis_store` keeps them on
Redis Streams consumer groups, its items claimed on a lease that another replica takes over when it expires.
Both backends implement the interfaces of :mod:`.base`: ``JobStoreAPI``, which is all the routes use, and
``ItemQueue``, the storage operations of the one job loop (:class:`~.runner.Runner`: claim, run, record,
dead-letter, cancel, drain, resume), which is written once for both.
"""

from halluscope.server.jobs.runner import CheckFailed, ItemRunner, JobRunner
from halluscope.server.jobs.store import ACTIVE, ID_LENGTH, JobStore, StoreLocked, result_line, valid_job_id

__all__ = [
    "ACTIVE",
    "ID_LENGTH",
    "CheckFailed",
    "ItemRunner",
    "JobRunner",
    "JobStore",
    "StoreLocked",
    "result_line",
    "valid_job_id",
]
