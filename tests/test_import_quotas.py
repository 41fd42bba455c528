"""Namespace quotas and imports (ops/transfer.py check_quota, file_usage; docs/security.md "Quotas"): what an
import will be charged is computed from the file before anything is written, and equals what the store is
charged after it; an import that would go over a quota, offline (`sidecar import`) or through a serving
sidecar (TransferService), is refused RESOURCE_EXHAUSTED QUOTA_EXCEEDED and writes nothing; each of the
import's thread transactions checks the recounted namespace again."""
from __future__ import annotations

import hashlib
import subprocess
import sys

import grpc
import pytest

from agentstate import Client
from sidecar.errors import ApiError
from sidecar.ops import transfer
from sidecar.storage import layout, usage
from sidecar.storage.store import Store

from conftest import InProcess, expect_error
from test_export import seed


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sidecar", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """An export of a namespace with every kind of record (test_export.seed) and memory history."""
    base = tmp_path_factory.mktemp("impq")
    side = InProcess(base / "src")
    try:
        with Client(side.address, namespace="src") as c:
            seed(c, small=True)
            c.memory.put(("users", "ann"), "prefs", {"lang": "it", "n": 3})  # one more old version
            c.memory.put(("h",), "k", {"v": "x" * 300})
            c.memory.put(("h",), "k", {"v": "x" * 300})  # the same value again: a second old version
            c.memory.put(("h",), "k", {"v": "y"})
    finally:
        side.close()
    store = Store(str(base / "src"))
    try:
        transfer.export(store, str(base / "ns.asx"), "src")
        with store.read() as txn:
            src = usage.namespace(txn, store, "src")
    finally:
        store.close()
    return {"base": base, "file": base / "ns.asx", "src": src}


def digest(path) -> str:
    store = Store(str(path))
    try:
        h = hashlib.sha256()
        with store.read() as txn:
            for name in layout.DB_NAMES:
                for k, v in txn.cursor(db=store.db[name]):
                    h.update(name.encode() + bytes(k) + bytes(v))
        return h.hexdigest()
    finally:
        store.close()


def counters(store, ns: str) -> tuple[int, int, int]:
    with store.read() as txn:
        assert usage.recount(txn, store).problems == []
        u = usage.namespace(txn, store, ns)
    return u.nbytes, u.threads, u.items


def set_quota(store, ns: str, max_bytes=usage.UNSET, max_threads=usage.UNSET, max_items=usage.UNSET) -> None:
    store.write(lambda txn: usage.set_quota(txn, store, ns, (max_bytes, max_threads, max_items), 1))


def test_file_usage_is_what_the_import_is_charged(exported, tmp_path):
    p = transfer.verify_file(str(exported["file"]), "dst")
    want = transfer.file_usage(p)
    src = exported["src"]  # (its bytes were charged put by put; an import charges its records as a recount does)
    assert (want.threads, want.items) == (src.threads, src.items) and want.nbytes > 40_000
    store = Store(str(tmp_path / "t"))
    try:
        store.write(lambda txn: None)
        transfer.import_file(store, p)
        assert counters(store, "dst") == (want.nbytes, want.threads, want.items)
        # a replace: what it refunds of the target plus what the file adds
        with store.read() as txn:
            gone = transfer.replaced_usage(txn, store, p, True)
        assert (gone.nbytes, gone.threads, gone.items) == (want.nbytes, want.threads, want.items)
        transfer.import_file(store, transfer.verify_file(str(exported["file"]), "dst"), replace=True)
        assert counters(store, "dst") == (want.nbytes, want.threads, want.items)
    finally:
        store.close()


@pytest.mark.parametrize("quota", ["max_bytes", "max_threads", "max_items"])
def test_an_offline_import_over_a_quota_is_refused_before_anything_is_written(exported, tmp_path, quota):
    p = transfer.verify_file(str(exported["file"]), "dst")
    want = transfer.file_usage(p)
    need = {"max_bytes": want.nbytes, "max_threads": want.threads, "max_items": want.items}[quota]
    target = tmp_path / "t"
    store = Store(str(target))
    try:
        set_quota(store, "dst", **{quota: need - 1})  # one short
    finally:
        store.close()
    before = digest(target)
    out = cli("import", "--from", str(exported["file"]), "--data-dir", str(target), "--namespace", "dst",
              "--quiet")
    assert out.returncode == 2, out.stdout
    assert "QUOTA_EXCEEDED" in out.stderr and "nothing was imported" in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last == (f"import refused: namespace 'dst' is over its quota {quota} with this file (holds 0, the import "
                    f"adds {need}, limit {need - 1}); nothing was imported (raise the quota with "
                    f"RetentionService.SetQuota, or free room, and import again)")
    assert digest(target) == before  # not a node, not a record: the refusal came before any write
    store = Store(str(target))
    try:
        set_quota(store, "dst", **{quota: need})  # exactly enough: imported
    finally:
        store.close()
    out = cli("import", "--from", str(exported["file"]), "--data-dir", str(target), "--namespace", "dst",
              "--quiet")
    assert out.returncode == 0, out.stderr
    store = Store(str(target))
    try:
        assert counters(store, "dst") == (want.nbytes, want.threads, want.items)
    finally:
        store.close()


def test_a_replace_is_checked_for_what_it_adds_net(exported, tmp_path):
    p = transfer.verify_file(str(exported["file"]), "dst")
    want = transfer.file_usage(p)
    store = Store(str(tmp_path / "t"))
    try:
        transfer.import_file(store, p)
        set_quota(store, "dst", max_bytes=want.nbytes, max_threads=want.threads, max_items=want.items)
        # the same file again with --replace: it replaces all it adds, so it fits exactly
        transfer.import_file(store, transfer.verify_file(str(exported["file"]), "dst"), replace=True)
        assert counters(store, "dst") == (want.nbytes, want.threads, want.items)
        # without replacing, a second copy into another namespace with the same quota is refused
        set_quota(store, "other", max_threads=want.threads - 1)
        with pytest.raises(ApiError) as e:
            transfer.import_file(store, transfer.verify_file(str(exported["file"]), "other"))
        assert e.value.reason == "QUOTA_EXCEEDED" and e.value.metadata["quota"] == "max_threads"
        assert "(this import adds" in e.value.message
        assert counters(store, "other") == (0, 0, 0)
    finally:
        store.close()


def test_each_thread_transaction_checks_the_quota_again(exported, tmp_path, monkeypatch):
    """Should the check before the values pass (here: skipped), each thread's transaction checks the recounted
    namespace again: the thread that would go over is refused whole, the threads before it stay whole (the
    counters and `sidecar verify` agree at that point), and the same import run again after the quota is raised
    finishes it (docs/lifecycle.md "Export and import": the atomicity unit is a thread)."""
    from sidecar.storage import verify  # noqa: PLC0415
    p = transfer.verify_file(str(exported["file"]), "dst")
    want = transfer.file_usage(p)
    store = Store(str(tmp_path / "t"))
    try:
        set_quota(store, "dst", max_threads=want.threads - 1)
        with monkeypatch.context() as m:
            m.setattr(transfer, "check_quota", lambda *a, **k: None)
            with pytest.raises(ApiError) as e:
                transfer.import_file(store, p)
        assert e.value.reason == "QUOTA_EXCEEDED" and e.value.metadata["quota"] == "max_threads"
        assert e.value.metadata["threads_imported"] == str(want.threads - 1)
        assert "run the same import again to finish it" in e.value.message
        with store.read() as txn:
            assert txn.stat(store.db["threads"])["entries"] == want.threads - 1
            assert txn.stat(store.db["memitems"])["entries"] == 0  # the namespace's part comes last
        assert counters(store, "dst")[1] == want.threads - 1
    finally:
        store.close()
    assert verify.verify_path(str(tmp_path / "t")).clean
    store = Store(str(tmp_path / "t"))
    try:
        set_quota(store, "dst", max_threads=want.threads)
        s = transfer.import_file(store, transfer.verify_file(str(exported["file"]), "dst"))
        assert s.resumed == want.threads - 1
        assert counters(store, "dst") == (want.nbytes, want.threads, want.items)
        with pytest.raises(ApiError) as e:  # finished: the marker is gone, a third run conflicts as any
            transfer.import_file(store, transfer.verify_file(str(exported["file"]), "dst"))
        assert e.value.reason == "IMPORT_THREAD_EXISTS"
    finally:
        store.close()
    assert verify.verify_path(str(tmp_path / "t")).clean


def test_an_import_through_a_serving_sidecar_is_refused_the_same_way(exported, tmp_path):
    p = transfer.verify_file(str(exported["file"]), "dst")
    want = transfer.file_usage(p)
    side = InProcess(tmp_path / "t")
    try:
        with Client(side.address, namespace="dst") as c:
            c.retention.set_quota(max_items=want.items - 1)
            store = side.sidecar.store
            with store.read() as txn:
                nodes_before = txn.stat(store.db["nodes"])["entries"]
            with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", quota="max_items",
                              requested=str(want.items), limit=str(want.items - 1), usage="0"):
                c.transfer.import_from(str(exported["file"]), namespace="dst")
            with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", quota="max_items"):
                c.transfer.import_from(str(exported["file"]), namespace="dst", check_only=True)  # a dry run says so too
            with store.read() as txn:
                assert txn.stat(store.db["nodes"])["entries"] == nodes_before
                assert txn.stat(store.db["threads"])["entries"] == 0
            c.retention.set_quota(max_items=want.items)
            c.transfer.import_from(str(exported["file"]), namespace="dst")
            u = c.retention.quota().usage
            assert (u.bytes, u.threads, u.items) == (want.nbytes, want.threads, want.items)
    finally:
        side.close()


def test_offline_the_servers_default_quotas_are_given_as_flags(exported, tmp_path):
    """A namespace without its own quotas takes the serving sidecar's defaults (serve --quota-max-*), which an
    offline store does not know: `sidecar import --quota-max-*` gives them."""
    want = transfer.file_usage(transfer.verify_file(str(exported["file"]), "dst"))
    target = tmp_path / "t"
    out = cli("import", "--from", str(exported["file"]), "--data-dir", str(target), "--namespace", "dst", "--quiet",
              "--quota-max-threads", str(want.threads - 1))
    assert out.returncode == 2 and "quota max_threads" in out.stderr.strip().splitlines()[-1], out.stderr
    out = cli("import", "--from", str(exported["file"]), "--data-dir", str(target), "--namespace", "dst", "--quiet",
              "--quota-max-threads", str(want.threads), "--quota-max-bytes", str(want.nbytes))
    assert out.returncode == 0, out.stderr
