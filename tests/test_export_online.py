"""Export from and import into serving sidecars (TransferService, `sidecar export|import --address`), and
encrypted namespaces (api/transfer.py, ops/transfer.py, docs/export-format.md).

Sidecar A holds test_export's seeded namespace; it is exported over gRPC and imported over gRPC into
sidecar B, which must then answer every read as A does. The online export must be the offline one's bytes
except the header's time (and so the trailer's BLAKE3); it is one snapshot while a writer goes on; a stream
cut short or damaged imports nothing, a conflict is refused unless --replace. An encrypted namespace moves
between two stores with different keys and is sealed under the target's; without its key the export is
refused with ENCRYPTION_KEY_MISSING naming the namespace, and no file is left.
"""
from __future__ import annotations

import base64
import os
import threading
import time
import uuid
from pathlib import Path

import grpc
import msgspec
import pytest
from conftest import SidecarProcess
from test_export import _rows, cli, reads, seed

from agentstate import codec
from agentstate.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from agentstate.v1 import transfer_pb2 as xpb
from sidecar.storage import exportfile, verify

NS = f"on-{uuid.uuid4().hex[:10]}"


def frames_of(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        out.append(data[pos + 4:pos + 4 + n])
        pos += 4 + n
    return out


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    base = tmp_path_factory.mktemp("online")
    a = SidecarProcess(base / "a").start()
    b = SidecarProcess(base / "b").start()
    try:
        with a.client(namespace=NS) as c:
            seed(c)
            before = reads(c)
        yield {"base": base, "a": a, "b": b, "reads": before}
    finally:
        a.stop()
        b.stop()


def test_export_and_import_across_two_serving_sidecars(two):
    """Export from A over gRPC, import into B over gRPC, equal reads through the APIs."""
    a, b, base = two["a"], two["b"], two["base"]
    f = base / "over-grpc.asx"
    out = cli("export", "--address", a.address, "--namespace", NS, "--to", str(f))
    assert out.returncode == 0, out.stderr
    assert "export done" in out.stdout and "5 threads" in out.stdout and "threads:" in out.stderr, out
    assert not [p for p in os.listdir(base) if p.startswith(".export")]
    out = cli("import", "--address", b.address, "--from", str(f), "--check")
    assert out.returncode == 0 and "without conflicts" in out.stdout, out
    with b.client(namespace=NS) as c:
        assert list(c.list_threads()) == []  # --check wrote nothing
    out = cli("import", "--address", b.address, "--from", str(f))
    assert out.returncode == 0, out.stderr
    assert "import done" in out.stdout and "5 threads (0 replaced)" in out.stdout and "sending:" in out.stderr
    with b.client(namespace=NS) as c:
        after = reads(c)
        assert c.check_integrity().missing_blobs == 0
        # the resident vector index of B serves the imported vectors
        hits = c.memory.search(("users",), vector=[1.0, 0.0, 0.5], limit=1)
        assert [(tuple(h.item.path), h.item.key) for h in hits] == [(("users", "ann"), "prefs")]
        assert hits[0].score > 0.99
    src = two["reads"]
    assert set(after) == set(src)
    for k in src:
        assert after[k] == src[k], k
    # B takes writes on the imported chain at once
    with b.client(namespace=NS) as c:
        c.put_checkpoint("t-a", {"n": 5}, checkpoint_id="c5", parent_id="c4")
        assert c.get_checkpoint("t-a").checkpoint_id == "c5"
        c.delete_thread("t-a")  # (the state the other tests expect: imported as exported)
    out = cli("import", "--address", b.address, "--from", str(f), "--replace")
    assert out.returncode == 0 and "5 threads (" in out.stdout and "replaced)" in out.stdout, out
    with b.client(namespace=NS) as c:
        assert reads(c) == src  # replaced over gRPC: as exported again


def test_online_export_is_the_offline_one_but_its_time(two, tmp_path):
    a = two["a"]
    online, offline = tmp_path / "online.asx", tmp_path / "offline.asx"
    assert cli("export", "--address", a.address, "--namespace", NS, "--to", str(online)).returncode == 0
    out = cli("export", "--data-dir", str(a.data_dir), "--namespace", NS, "--to", str(offline))
    assert out.returncode == 0, out.stderr
    x, y = frames_of(online.read_bytes()), frames_of(offline.read_bytes())
    assert len(x) == len(y) > 100
    assert x[1:-1] == y[1:-1]  # every record byte for byte
    hx, hy = msgspec.msgpack.decode(x[0]), msgspec.msgpack.decode(y[0])
    assert hx.pop("created") != "" and hy.pop("created") != ""
    assert hx == hy  # the source (its data directory) and the scope too
    tx, ty = msgspec.msgpack.decode(x[-1]), msgspec.msgpack.decode(y[-1])
    assert tx["counts"] == ty["counts"]
    # a file made equal in its time is equal in every byte, trailer included
    hx["created"] = hy["created"] = "2026-01-01T00:00:00.000000Z"
    assert msgspec.msgpack.encode(hx) == msgspec.msgpack.encode(hy)


def test_one_snapshot_while_a_writer_goes_on(two, tmp_path):
    """A slow reader keeps the export open while a writer adds to a chain: the file holds a whole prefix of
    the chain, everything acknowledged before the export began, and imports into a clean store."""
    a = two["a"]
    ns = f"snap-{uuid.uuid4().hex[:8]}"
    acked: list[int] = []
    stop = threading.Event()
    with a.client(namespace=ns) as c:
        for i in range(1, 41):
            c.put_checkpoint("w", {"n": i, "pad": "p" * 20_000 + str(i)}, checkpoint_id=f"c{i}",
                             parent_id=f"c{i - 1}" if i > 1 else None)
            acked.append(i)

    def writer():
        with a.client(namespace=ns) as w:
            i = len(acked)
            while not stop.is_set() and i < 2000:
                i += 1
                w.put_checkpoint("w", {"n": i, "pad": "p" * 20_000 + str(i)}, checkpoint_id=f"c{i}",
                                 parent_id=f"c{i - 1}")
                acked.append(i)

    t = threading.Thread(target=writer)
    t.start()
    try:
        time.sleep(0.2)
        with a.client(namespace=ns) as c:
            before = len(acked)
            data = bytearray()
            summary = None
            for msg in c.transfer.stub.ExportNamespace(xpb.ExportNamespaceRequest(namespace=ns, chunk_bytes=16384),
                                                      timeout=120):
                part = msg.WhichOneof("part")
                if part == "data":
                    data += msg.data
                    time.sleep(0.01)  # a slow reader: the export stays open while the writer goes on
                elif part == "summary":
                    summary = msg.summary
            after = len(acked)
    finally:
        stop.set()
        t.join()
    assert summary is not None and summary.bytes == len(data)
    assert after > before + 5, (before, after)  # writes went on while the export was open
    f = tmp_path / "snap.asx"
    f.write_bytes(bytes(data))
    contents = exportfile.read(str(f))
    ids = sorted(int(r["checkpoint_id"][1:]) for r in contents.records if r["t"] == "checkpoint")
    assert ids == list(range(1, len(ids) + 1))  # a whole prefix of the chain: one snapshot
    assert before <= len(ids) <= after
    out = cli("import", "--from", str(f), "--data-dir", str(tmp_path / "t"))
    assert out.returncode == 0, out.stderr
    assert verify.verify_path(str(tmp_path / "t")).clean


def _wait_rows(data_dir: Path, want: dict, timeout: float = 5.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        got = _rows(data_dir)
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


@pytest.mark.parametrize("damage", ["truncate", "flip", "short-stream", "cancelled"])
def test_a_cut_or_damaged_stream_imports_nothing(two, tmp_path, damage):
    a = two["a"]
    f = tmp_path / "good.asx"
    assert cli("export", "--address", a.address, "--namespace", NS, "--to", str(f)).returncode == 0
    data = f.read_bytes()
    target = SidecarProcess(tmp_path / "target").start()
    try:
        with target.client(namespace="keep") as c:
            c.put_checkpoint("mine", {"v": 1}, checkpoint_id="k1")
        before = _rows(target.data_dir)
        with target.client(namespace=NS) as c:
            if damage in ("truncate", "flip"):
                bad = bytearray(data[:len(data) * 2 // 3] if damage == "truncate" else data)
                if damage == "flip":
                    bad[len(bad) // 2] ^= 0x01
                (tmp_path / "bad.asx").write_bytes(bytes(bad))
                out = cli("import", "--address", target.address, "--from", str(tmp_path / "bad.asx"))
                assert out.returncode == 2 and "EXPORT_FILE_INVALID" in out.stderr, out.stderr
                assert "nothing was imported" in out.stderr
            elif damage == "short-stream":  # the header announces the whole file, half of it comes
                msgs = [xpb.ImportNamespaceRequest(header=xpb.ImportHeader(namespace=NS, size=len(data))),
                        xpb.ImportNamespaceRequest(data=data[:len(data) // 2])]
                with pytest.raises(grpc.RpcError) as e:
                    c.transfer.stub.ImportNamespace(iter(msgs), timeout=30)
                assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "ended after" in e.value.details()
            else:  # the client goes away in the middle of its stream
                def gen():
                    yield xpb.ImportNamespaceRequest(header=xpb.ImportHeader(namespace=NS))
                    yield xpb.ImportNamespaceRequest(data=data[:len(data) // 2])
                    raise RuntimeError("client gone")
                with pytest.raises(grpc.RpcError) as e:
                    c.transfer.stub.ImportNamespace(gen(), timeout=30)
                assert e.value.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN)
            assert list(c.list_threads()) == []
        assert _wait_rows(target.data_dir, before) == before
        assert not [p for p in os.listdir(target.data_dir) if p.startswith(".import")]
    finally:
        target.stop()


def test_conflicts_are_refused_unless_replace_online(two, tmp_path):
    a = two["a"]
    f = tmp_path / "ns.asx"
    assert cli("export", "--address", a.address, "--namespace", NS, "--to", str(f)).returncode == 0
    target = SidecarProcess(tmp_path / "target").start()
    try:
        with target.client(namespace=NS) as c:
            c.put_checkpoint("t-b", {"mine": True}, checkpoint_id="m1")
            before = _rows(target.data_dir)
            with pytest.raises(AlreadyExists) as e:
                c.transfer.import_from(str(f))
            assert e.value.reason == "IMPORT_THREAD_EXISTS" and e.value.metadata["thread_id"] == "t-b"
            assert "ImportNamespaceRequest.replace" in str(e.value)  # names the field, not only the CLI flag
            assert _rows(target.data_dir) == before
            assert [t.thread_id for t in c.list_threads()] == ["t-b"]
            r = c.transfer.import_from(str(f), replace=True)
            assert (r.threads, r.replaced, r.namespace) == (5, 1, NS)
            assert [x.checkpoint_id for x in c.list_checkpoints("t-b")] == []
            after = reads(c)
        for k, v in two["reads"].items():
            assert after[k] == v, k
        # into another namespace of the same sidecar: no conflict there
        with target.client(namespace="moved") as c:
            r = c.transfer.import_from(str(f), namespace="moved")
            assert r.namespace == "moved" and r.threads == 5
            assert codec.decode(c.memory.get(("users", "ann"), "prefs").value.msgpack) == {"lang": "fr", "n": 2}
    finally:
        target.stop()


def test_export_of_a_missing_thread_and_bad_requests(two, tmp_path):
    a = two["a"]
    out = cli("export", "--address", a.address, "--namespace", NS, "--thread", "nope", "--to",
              str(tmp_path / "x.asx"))
    assert out.returncode == 2 and "THREAD_NOT_FOUND" in out.stderr and "nothing was exported" in out.stderr
    assert not os.listdir(tmp_path)
    with a.client(namespace=NS) as c:
        with pytest.raises(grpc.RpcError) as e:
            list(c.transfer.stub.ExportNamespace(xpb.ExportNamespaceRequest(namespace=NS, chunk_bytes=64 << 20)))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "chunk_bytes" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:  # data before the header
            c.transfer.stub.ImportNamespace(iter([xpb.ImportNamespaceRequest(data=b"x")]), timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "header" in e.value.details()
        # a thread alone, over gRPC
        s = c.transfer.export_to(str(tmp_path / "t-a.asx"), thread_id="t-a")
        assert s.threads == 1 and exportfile.read(str(tmp_path / "t-a.asx")).header["scope"] == {
            "namespace": NS, "thread": "t-a"}


# ---------------------------------------------------------------- encrypted namespaces

SEC = "sec"
MARKER = "MARKER-" + uuid.uuid4().hex  # a string that must never be found in an encrypted store's files


def key_file(path: Path, name: str) -> Path:
    path.write_text(f'[[key]]\nnamespace = "{SEC}"\nid = "{name}"\nkey = "{base64.b64encode(os.urandom(32)).decode()}"\n')
    path.chmod(0o600)
    return path


def in_files(data_dir: Path, needle: bytes) -> list[str]:
    return [p.name for p in data_dir.iterdir() if p.is_file() and needle in p.read_bytes()]


def seed_secret(c) -> None:
    c.put_checkpoint("s1", {"messages": [{"role": "user", "content": MARKER}], "n": 1}, checkpoint_id="c1")
    c.put_checkpoint("s1", {"messages": [{"role": "ai", "content": "x" + MARKER}], "n": 2}, checkpoint_id="c2",
                     parent_id="c1")
    c.memory.put(("notes",), "k", {"text": MARKER})
    c.artifacts.upload("s1", "a.bin", MARKER.encode() * 3)


def secret_reads(c) -> dict:
    return {"cps": [x.SerializeToString(deterministic=True) for x in c.list_checkpoints("s1", include_values=True)],
            "mem": codec.decode(c.memory.get(("notes",), "k").value.msgpack),
            "art": c.artifacts.download("s1", "a.bin")[1]}


@pytest.fixture(scope="module")
def encrypted(tmp_path_factory):
    base = tmp_path_factory.mktemp("enc")
    ka, kb = key_file(base / "a.toml", "a-1"), key_file(base / "b.toml", "b-1")
    a = SidecarProcess(base / "a", "--encryption-keys", str(ka)).start()
    try:
        with a.client(namespace=SEC) as c:
            seed_secret(c)
            before = secret_reads(c)
        assert before["mem"] == {"text": MARKER}
        assert not in_files(a.data_dir, MARKER.encode())
        yield {"base": base, "a": a, "ka": ka, "kb": kb, "reads": before}
    finally:
        a.stop()


def test_encrypted_namespace_between_two_stores_with_different_keys(encrypted, tmp_path):
    a, kb = encrypted["a"], encrypted["kb"]
    f = tmp_path / "sec.asx"
    out = cli("export", "--address", a.address, "--namespace", SEC, "--to", str(f))
    assert out.returncode == 0, out.stderr
    assert "PLAINTEXT" in out.stdout  # the summary says what the file now holds
    assert MARKER.encode() in f.read_bytes()  # values in plaintext, as documented
    assert exportfile.read(str(f)).header["source"]["encrypted"] is True
    b = SidecarProcess(tmp_path / "b", "--encryption-keys", str(kb)).start()
    try:
        out = cli("import", "--address", b.address, "--from", str(f))
        assert out.returncode == 0, out.stderr
        assert "sealed under the target namespace's key" in out.stdout
        with b.client(namespace=SEC) as c:
            assert secret_reads(c) == encrypted["reads"]
    finally:
        b.stop()
    assert not in_files(tmp_path / "b", MARKER.encode())  # sealed under B's key, nothing plain on disk
    # B's values are B's key's: without it they do not open (and A's key is no use there)
    b2 = SidecarProcess(tmp_path / "b", "--encryption-keys", str(encrypted["ka"])).start()
    try:
        with b2.client(namespace=SEC) as c:
            with pytest.raises(FailedPrecondition) as e:
                c.get_checkpoint("s1")
            assert e.value.reason == "ENCRYPTION_KEY_MISSING" and e.value.metadata["namespace"] == SEC
    finally:
        b2.stop()
    # offline, both ways: the served store read with its key file, a new store given another key
    f2 = tmp_path / "offline.asx"
    out = cli("export", "--data-dir", str(a.data_dir), "--namespace", SEC, "--encryption-keys",
              str(encrypted["ka"]), "--to", str(f2))
    assert out.returncode == 0, out.stderr
    assert frames_of(f2.read_bytes())[1:-1] == frames_of(f.read_bytes())[1:-1]
    out = cli("import", "--from", str(f2), "--data-dir", str(tmp_path / "c"), "--encryption-keys", str(kb))
    assert out.returncode == 0 and "sealed" in out.stdout, out
    assert not in_files(tmp_path / "c", MARKER.encode())
    c_side = SidecarProcess(tmp_path / "c", "--encryption-keys", str(kb)).start()
    try:
        with c_side.client(namespace=SEC) as c:
            assert secret_reads(c) == encrypted["reads"]
    finally:
        c_side.stop()
    assert verify.verify_path(str(tmp_path / "c")).clean


def test_export_without_the_key_names_the_namespace_and_leaves_no_file(encrypted, tmp_path):
    a = encrypted["a"]
    f = tmp_path / "nokey.asx"
    env_free = {k: v for k, v in os.environ.items() if k != "SIDECAR_ENCRYPTION_KEYS"}
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "sidecar", "export", "--data-dir", str(a.data_dir), "--namespace",
                          SEC, "--to", str(f)], capture_output=True, text=True, timeout=120, env=env_free)
    assert out.returncode == 2
    assert "ENCRYPTION_KEY_MISSING" in out.stderr and f"'{SEC}'" in out.stderr and "--encryption-keys" in out.stderr
    assert not os.listdir(tmp_path)  # no file, no temporary file
    # a wrong key under the name the store used is refused, not used to write garbage
    wrong = key_file(tmp_path.parent / f"wrong-{uuid.uuid4().hex[:6]}.toml", "a-1")
    out = cli("export", "--data-dir", str(a.data_dir), "--namespace", SEC, "--encryption-keys", str(wrong),
              "--to", str(f))
    assert out.returncode == 2 and "other key material" in out.stderr
    assert not os.listdir(tmp_path)
    # refusing plaintext, online and offline
    out = cli("export", "--address", a.address, "--namespace", SEC, "--refuse-encrypted", "--to", str(f))
    assert out.returncode == 2 and "EXPORT_PLAINTEXT_REFUSED" in out.stderr
    out = cli("export", "--data-dir", str(a.data_dir), "--namespace", SEC, "--encryption-keys",
              str(encrypted["ka"]), "--refuse-encrypted", "--to", str(f))
    assert out.returncode == 2 and "EXPORT_PLAINTEXT_REFUSED" in out.stderr
    assert not os.listdir(tmp_path)


def test_plaintext_import_of_an_encrypted_namespace_needs_allow_plaintext(encrypted, tmp_path):
    a = encrypted["a"]
    f = tmp_path / "sec.asx"
    with a.client(namespace=SEC) as c:
        s = c.transfer.export_to(str(f))
        assert s.encrypted
    plain = SidecarProcess(tmp_path / "plain").start()
    try:
        with plain.client(namespace=SEC) as c:
            before = _rows(plain.data_dir)
            with pytest.raises(FailedPrecondition) as e:
                c.transfer.import_from(str(f))
            assert e.value.reason == "IMPORT_PLAINTEXT_REFUSED" and e.value.metadata["namespace"] == SEC
            assert _rows(plain.data_dir) == before
            r = c.transfer.import_from(str(f), allow_plaintext=True)
            assert r.source_encrypted and not r.sealed
            assert secret_reads(c) == encrypted["reads"]
    finally:
        plain.stop()
    out = cli("import", "--from", str(f), "--data-dir", str(tmp_path / "off"))
    assert out.returncode == 2 and "IMPORT_PLAINTEXT_REFUSED" in out.stderr
    out = cli("import", "--from", str(f), "--data-dir", str(tmp_path / "off"), "--allow-plaintext")
    assert out.returncode == 0 and "UNENCRYPTED" in out.stdout, out


def test_a_damaged_import_stream_is_invalid_argument_with_nothing_written(encrypted, tmp_path):
    """The typed client error of a damaged file (the reason and the field)."""
    a = encrypted["a"]
    f = tmp_path / "sec.asx"
    with a.client(namespace=SEC) as c:
        c.transfer.export_to(str(f))
    data = bytearray(f.read_bytes())
    data[100] ^= 0xFF
    (tmp_path / "bad.asx").write_bytes(bytes(data))
    with a.client(namespace="elsewhere") as c:
        with pytest.raises(InvalidArgument) as e:
            c.transfer.import_from(str(tmp_path / "bad.asx"), namespace="elsewhere")
        assert e.value.reason == "EXPORT_FILE_INVALID"
        assert list(c.list_threads()) == []
