"""Imported by the fork server that starts the check worker processes (``halluscope.server.cpu_pool``), never by
anything else: it warms up once there (:func:`~halluscope.server.warmup.warm_up`: the methods, their plugins and
stages, their libraries), so that every worker forked from it starts warm, in a fraction of the time. A failure
here is left to each worker's own warm-up to report (an exception would end the fork server)."""

from halluscope.server.warmup import warm_up

try:
    warm_up()
except Exception:  # noqa: BLE001, S110 - each worker warms up again and fails its start with the reason
    pass
