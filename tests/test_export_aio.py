"""AsyncClient.transfer (agentstate/transfer.py AsyncTransfer) against two serving sidecars: an async export
is the sync export's file but its header's time (and so its trailer's BLAKE3), an async import into a second
sidecar answers every read as the source does, and its refusals are the sync client's typed errors."""
from __future__ import annotations

import asyncio
import os
import uuid

import msgspec
import pytest
from conftest import SidecarProcess
from test_export import reads, seed
from test_export_online import frames_of

from agentstate import AsyncClient
from agentstate.errors import AlreadyExists, NotFound

NS = f"aio-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    base = tmp_path_factory.mktemp("aio-transfer")
    a = SidecarProcess(base / "a").start()
    b = SidecarProcess(base / "b").start()
    try:
        with a.client(namespace=NS) as c:
            seed(c, small=True)
            before = reads(c)
        yield {"a": a, "b": b, "reads": before}
    finally:
        a.stop()
        b.stop()


def test_async_export_is_the_sync_one_but_its_time_and_imports_to_equal_reads(pair, tmp_path):
    a, b = pair["a"], pair["b"]
    sync_file, async_file = tmp_path / "sync.asx", tmp_path / "async.asx"
    with a.client(namespace=NS) as c:
        sync_summary = c.transfer.export_to(str(sync_file))
    seen: list[tuple[str, int, int]] = []

    async def export():
        async with AsyncClient(a.address, namespace=NS) as c:
            return await c.transfer.export_to(str(async_file), progress=lambda *p: seen.append(p))

    summary = asyncio.run(export())
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".export")]
    assert summary.bytes == async_file.stat().st_size == sync_file.stat().st_size
    assert (summary.threads, summary.checkpoints, summary.records, summary.blobs) == (
        sync_summary.threads, sync_summary.checkpoints, sync_summary.records, sync_summary.blobs)
    assert summary.threads == 5
    assert seen and {p[0] for p in seen} <= {"threads", "memory"}
    x, y = frames_of(async_file.read_bytes()), frames_of(sync_file.read_bytes())
    assert len(x) == len(y) > 20
    assert x[1:-1] == y[1:-1]  # every record byte for byte
    hx, hy = msgspec.msgpack.decode(x[0]), msgspec.msgpack.decode(y[0])
    assert hx.pop("created") != "" and hy.pop("created") != ""
    assert hx == hy
    assert msgspec.msgpack.decode(x[-1])["counts"] == msgspec.msgpack.decode(y[-1])["counts"]

    sent: list[tuple[str, int, int]] = []

    async def import_():
        async with AsyncClient(b.address, namespace=NS) as c:
            checked = await c.transfer.import_from(str(async_file), check_only=True)
            r = await c.transfer.import_from(str(async_file), progress=lambda *p: sent.append(p))
            with pytest.raises(AlreadyExists):  # a second import conflicts unless replace
                await c.transfer.import_from(str(async_file))
            again = await c.transfer.import_from(str(async_file), replace=True)
            return checked, r, again

    checked, r, again = asyncio.run(import_())
    assert checked.threads == 5
    assert (r.namespace, r.threads, r.replaced, r.bytes) == (NS, 5, 0, summary.bytes)
    assert r.blake3 == summary.blake3
    assert again.replaced == 5
    assert sent[-1] == ("sending", summary.bytes, summary.bytes)
    with b.client(namespace=NS) as c:
        after = reads(c)
    assert after == pair["reads"]


def test_async_export_refusals_leave_no_file(pair, tmp_path):
    a = pair["a"]
    existing = tmp_path / "there.asx"
    existing.write_bytes(b"mine")

    async def body():
        async with AsyncClient(a.address, namespace=NS) as c:
            with pytest.raises(FileExistsError):
                await c.transfer.export_to(str(existing))
            with pytest.raises(NotFound):
                await c.transfer.export_to(str(tmp_path / "none.asx"), thread_id="no-such-thread")

    asyncio.run(body())
    assert existing.read_bytes() == b"mine"
    assert sorted(os.listdir(tmp_path)) == ["there.asx"]


def test_the_async_facet_has_the_sync_calls():
    import inspect

    from agentstate import Client

    with Client("unix:/nonexistent.sock") as sc:
        sync_facet = sc.transfer

        async def main():
            async with AsyncClient("unix:/nonexistent.sock") as c:
                return c.transfer

        async_facet = asyncio.run(main())
    public = {n for n in dir(sync_facet) if not n.startswith("_") and callable(getattr(sync_facet, n))}
    assert public == {"export_to", "import_from"}
    for name in public:
        assert inspect.iscoroutinefunction(getattr(async_facet, name)), name
        assert (inspect.signature(getattr(async_facet, name)).parameters
                == inspect.signature(getattr(sync_facet, name)).parameters), name
