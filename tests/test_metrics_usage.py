"""Per-namespace usage and quota gauges at /metrics (sidecar/metrics.py, storage/usage.namespaces): they say
what GetQuota says for each namespace, follow writes and deletes, and show the quota in effect (own or the
server's default)."""
from __future__ import annotations

from agentstate.conversations import item

from test_metrics import started, value


def gauges(scraper, ns: str) -> tuple:
    m = scraper.scrape()
    return tuple(int(value(m, f"sidecar_namespace_{n}", namespace=ns)) for n in ("bytes", "threads", "items",
                                                                                   "checkpoints"))


def quotas(scraper, ns: str) -> tuple:
    m = scraper.scrape()
    return tuple(int(value(m, "sidecar_namespace_quota", namespace=ns, quota=q))
                 for q in ("max_bytes", "max_threads", "max_items"))


def test_usage_and_quota_gauges_per_namespace(tmp_path_factory):
    proc, scraper = started(tmp_path_factory, "--quota-max-items", "50")
    try:
        with proc.client(namespace="alpha") as a, proc.client(namespace="beta") as b:
            a.put_checkpoint("t", {"v": "x" * 3000})
            a.conversations.append("t", [item("message", "hello", role="user")])
            a.memory.put(["p"], "k", {"v": "y" * 200})
            b.put_checkpoint("u1", {"v": 1})
            b.put_checkpoint("u2", {"v": 2})
            b.retention.set_quota(max_bytes=10_000_000, max_threads=7)
            for c in (a, b):
                u = c.retention.quota().usage
                assert gauges(scraper, c.namespace) == (u.bytes, u.threads, u.items, u.checkpoints)
            assert gauges(scraper, "alpha")[:3] != gauges(scraper, "beta")[:3]
            assert quotas(scraper, "alpha") == (0, 0, 50)  # the server's defaults
            assert quotas(scraper, "beta") == (10_000_000, 7, 50)  # its own, the unset field the default
            before = gauges(scraper, "alpha")
            a.memory.delete(["p"], "k")  # the item goes; its value stays charged as history
            after = gauges(scraper, "alpha")
            assert after[2] == before[2] - 1 and after[0] == before[0]
            a.memory.delete(["p"], "k", purge=True)  # purged: refunded
            assert gauges(scraper, "alpha")[0] < before[0]
            a.delete_thread("t")
            assert gauges(scraper, "alpha") == (0, 0, 0, 0)
            assert value(scraper.scrape(), "sidecar_namespace_usage_omitted") == 0
    finally:
        proc.stop()
