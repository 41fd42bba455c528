"""Encryption at rest (storage/encryption.py): sealed value records, scoped addresses, rotation, re-encryption,
crypto-shredding, wrong keys and tampering, verify, GC; both hot-path twins read sealed records alike."""
from __future__ import annotations

import base64
import importlib
import os
import random
import subprocess
import sys
from pathlib import Path

import grpc
import lmdb
import pytest
from conftest import SidecarProcess, expect_error

from agentstate import Append, SetKeys, codec
from agentstate.v1 import admin_pb2
from sidecar.errors import ApiError
from sidecar.storage import compression, encryption, hotpath, layout, verify
from sidecar.storage import _hotpath_py

CODES = grpc.StatusCode
SEC = "secret-ns"
OPEN = "open-ns"


def key_entry(ns: str, name: str, material: bytes | None = None) -> str:
    material = material if material is not None else os.urandom(32)
    return f'[[key]]\nnamespace = "{ns}"\nid = "{name}"\nkey = "{base64.b64encode(material).decode()}"\n\n'


def marker(tag: str) -> str:
    """A string that zstd keeps whole (random letters, nothing to repeat) so a grep finds it when it is stored
    in the clear."""
    rnd = random.Random(tag)
    return f"MARK{tag}-" + "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(48))


def files_contain(data_dir: Path, needle: str) -> list[str]:
    """Names of the files of the data directory (LMDB file, write-ahead logs) holding ``needle``."""
    return [p.name for p in data_dir.iterdir() if p.is_file() and needle.encode() in p.read_bytes()]


def raw_env(data_dir: Path, write: bool = False):
    env = lmdb.open(str(data_dir), readonly=not write, max_dbs=len(layout.DB_NAMES) + 8, subdir=True, lock=True)
    return env, {n: env.open_db(n.encode(), create=False) for n in layout.DB_NAMES}


# ------------------------------------------------------------------ the key file

def test_key_file_errors_name_the_entry_never_the_material():
    secret = base64.b64encode(b"k" * 31).decode()
    with pytest.raises(encryption.KeyFileError, match="entry 1.*32 bytes") as e:
        encryption.parse(f'[[key]]\nnamespace = "a"\nid = "k1"\nkey = "{secret}"\n')
    assert secret not in str(e.value)
    with pytest.raises(encryption.KeyFileError, match="not valid base64"):
        encryption.parse('[[key]]\nnamespace = "a"\nid = "k1"\nkey = "!!!"\n')
    with pytest.raises(encryption.KeyFileError, match="twice"):
        encryption.parse(key_entry("a", "k1") + key_entry("a", "k1"))
    with pytest.raises(encryption.KeyFileError, match="unknown field"):
        encryption.parse('[[key]]\nnamespace = "a"\nid = "k1"\nkey = "x"\nkeys = 1\n')
    with pytest.raises(encryption.KeyFileError, match="namespace"):
        encryption.parse(key_entry("", "k1"))
    material = os.urandom(32)
    ring = encryption.parse(key_entry("a", "k1", material) + key_entry("a", "k2") + key_entry("b", "k1"))
    assert ring.scope("a").current.name == "k2" and ring.scope("b").current.name == "k1" and ring.scope("c") is None
    assert base64.b64encode(material).decode() not in repr(ring) + repr(ring.keys["a"])
    assert not any(material in repr(v).encode() for v in vars(ring).values())
    # the environment variable holds the same text; a file wins over it
    assert encryption.load(None, {encryption.ENV_VAR: key_entry("z", "k9")}).scope("z").current.name == "k9"
    assert encryption.load(None, {}) is None


def test_seal_binds_key_and_node_and_refuses_garbage():
    ring = encryption.parse(key_entry("a", "k1") + key_entry("a", "k2") + key_entry("b", "k1"))
    ids = encryption.install(ring, {})
    try:
        h = os.urandom(32)
        stored = b"v" + codec.encode("hello")
        k1, k2 = ring.keys["a"]
        rec = h + k1.seal(h, stored)
        assert stored not in rec and encryption.open_record(rec) == h + stored
        assert h + k1.seal(h, stored) != rec  # a fresh nonce every time
        flipped = bytearray(rec)
        flipped[-20] ^= 1  # one ciphertext bit
        for bad in (bytes(flipped),
                    os.urandom(32) + rec[32:],  # another node's hash: the associated data differs
                    rec[:33] + k2.id + rec[41:],  # named as sealed with the other key of the namespace
                    rec[:33] + ring.keys["b"][0].id + rec[41:]):  # or another namespace's key
            with pytest.raises(ApiError) as e:
                encryption.open_record(bad)
            assert e.value.reason == "ENCRYPTED_RECORD_INVALID" and e.value.code == CODES.DATA_LOSS
        with pytest.raises(ApiError) as e:
            encryption.open_record(rec[:33] + bytes(8) + rec[41:])
        assert e.value.reason == "ENCRYPTION_KEY_MISSING" and e.value.code == CODES.FAILED_PRECONDITION
    finally:
        encryption.uninstall(ids)
    with pytest.raises(ApiError) as e:  # the store that held the key closed: the key is gone from the process
        encryption.open_record(rec)
    assert e.value.reason == "ENCRYPTION_KEY_MISSING"


def _twins():
    out = [_hotpath_py]
    try:
        out.append(importlib.import_module("sidecar.storage._hotpath_c"))
    except ImportError:
        pass
    return out


def test_both_twins_read_sealed_records_alike():
    """Sealed ``v``, ``z`` and ``c`` records (a chunked long value) read back the same through both twins."""
    twins = _twins()
    assert len(twins) == 2 or not hotpath.NATIVE  # the compiled twin, when the server uses it, is checked too
    ring = encryption.parse(key_entry("a", "k1"))
    ids = encryption.install(ring, {})
    key = ring.keys["a"][0]
    try:
        small = codec.encode("short text")
        packable = codec.encode("alike " * 200)
        big = codec.encode(bytes(random.Random(3).randbytes(200_000)))
        for enc in (small, packable, big):
            built: list = []
            root = _hotpath_py.value_node(enc, built)
            records: dict[bytes, bytes] = {}
            idmap: dict[bytes, bytes] = {}
            packer = compression.Packer(lambda: (None, []), lambda i, d: None)
            for h, node in built:  # children first in ``built``
                stored = _hotpath_py.stored_node(node, idmap.__getitem__)
                if stored[0] == _hotpath_py.TAG_VALUE:
                    stored = packer.pack(h, stored, False)
                if stored[0] in encryption.SEALED_TAGS:
                    stored = key.seal(h, stored)
                node_id = layout.u64(len(records) + 1)
                idmap[h] = node_id
                records[node_id] = h + stored
            assert all(r[32] == encryption.TAG_SEALED for r in records.values() if r[32] != _hotpath_py.TAG_CHUNKED)
            compression.forget_cache()
            for twin in twins:
                assert twin.stored_encoding(records[idmap[root]], records.get) == enc
                assert twin.stored_children(records[idmap[root]][32:]) == (
                    [] if len(built) == 1 else [idmap[h] for h, _ in built[:-1]])
            flipped = bytearray(records[idmap[built[0][0]]])
            flipped[-1] ^= 1
            records[idmap[built[0][0]]] = bytes(flipped)
            for twin in twins:
                with pytest.raises(ApiError) as e:
                    twin.stored_encoding(records[idmap[root]], records.get)
                assert e.value.reason == "ENCRYPTED_RECORD_INVALID"
    finally:
        encryption.uninstall(ids)


# ------------------------------------------------------------------ a sidecar with keys

def _content(c, tid: str, mark: str) -> str:
    """Write ``mark`` into every kind of value: channel values (list, map, scalar, a delta), pending writes,
    a small and a chunked artifact. Returns the checkpoint id."""
    first = c.put_checkpoint(tid, {"messages": [mark + " list"], "state": {"k": mark + " map"}, "note": mark})
    cp = c.put_checkpoint(tid, {"messages": Append([mark + " appended"]), "state": {"k": mark + " map"},
                                "note": mark}, parent_id=first.checkpoint.checkpoint_id)
    cid = cp.checkpoint.checkpoint_id
    c.put_writes(tid, cid, [("task-1", 0, "messages", mark + " pending")])
    c.artifacts.upload(tid, "small.txt", (mark + " small artifact").encode())
    big = random.Random(5).randbytes(300_000)
    c.artifacts.upload(tid, "big.bin", big[:150_000] + (mark + " big artifact").encode() + big[150_000:])
    return cid


def _check_content(c, tid: str, mark: str) -> None:
    values = c.get_values(tid)
    assert values["messages"] == [mark + " list", mark + " appended"]
    assert values["state"] == {"k": mark + " map"} and values["note"] == mark
    cp = c.get_checkpoint(tid, include_pending_writes=True)
    assert [codec.decode(w.value.msgpack) for w in cp.pending_writes] == [mark + " pending"]
    assert c.artifacts.download(tid, "small.txt")[1] == (mark + " small artifact").encode()
    assert (mark + " big artifact").encode() in c.artifacts.download(tid, "big.bin")[1]


def test_values_sealed_at_rest_and_shredded_with_their_key(tmp_path):
    keys = tmp_path / "keys.toml"
    material = os.urandom(32)
    keys.write_text(key_entry(SEC, "k1", material))
    keys.chmod(0o600)
    data = tmp_path / "data"
    sec_mark, open_mark = marker("sec"), marker("open")
    proc = SidecarProcess(data, "--encryption-keys", str(keys), "--durability", "process").start()
    try:
        with proc.client(namespace=SEC) as c:
            _content(c, "t", sec_mark)
            _check_content(c, "t", sec_mark)
            assert c.check_integrity().problems == []
        with proc.client(namespace=OPEN) as c:  # the control: the same writes in a namespace without a key
            _content(c, "t", open_mark)
        # the write-ahead log (process durability) holds sealed records too
        assert files_contain(data, open_mark) and not files_contain(data, sec_mark)
    finally:
        proc.stop()
    assert "data.mdb" in files_contain(data, open_mark)  # a grep that finds what is stored in the clear
    assert files_contain(data, sec_mark) == []
    assert base64.b64encode(material).decode() not in proc.log() and "'k1'" in proc.log()  # named, never shown

    # the key goes (crypto-shredding): every read and write of the namespace's values fails, clearly
    keys.write_text("")
    proc = SidecarProcess(data, "--encryption-keys", str(keys)).start()
    try:
        with proc.client(namespace=SEC) as c:
            with expect_error(CODES.FAILED_PRECONDITION, "ENCRYPTION_KEY_MISSING", namespace=SEC):
                c.get_values("t")
            with expect_error(CODES.FAILED_PRECONDITION, "ENCRYPTION_KEY_MISSING", namespace=SEC):
                c.artifacts.download("t", "big.bin")
            with expect_error(CODES.FAILED_PRECONDITION, "ENCRYPTION_KEY_MISSING", namespace=SEC):
                c.put_checkpoint("t2", {"x": "would be plaintext next to sealed records"})
            assert [t.thread_id for t in c.list_threads()] == ["t"]  # ids and metadata are not encrypted
            assert c.check_integrity().problems == []  # shredded values are not damage
        with proc.client(namespace=OPEN) as c:
            _check_content(c, "t", open_mark)
    finally:
        proc.stop()
    assert files_contain(data, sec_mark) == []
    report = verify.verify_path(str(data))
    assert report.clean and report.key_missing.get(SEC, 0) >= 6 and not report.sealed


def test_a_key_removed_by_reload_leaves_nothing_readable_from_memory(tmp_path):
    """Crypto-shredding without a restart: values read (and migrated on read, which keeps migrated items and
    lists in memory) while the key was loaded fail the same way once a SIGHUP reload has removed it."""
    from agentstate import schemas as s
    keys = tmp_path / "keys.toml"
    keys.write_text(key_entry(SEC, "k1"))
    keys.chmod(0o600)
    proc = SidecarProcess(tmp_path / "data", "--encryption-keys", str(keys)).start()
    try:
        with proc.client(namespace=SEC) as c:
            c.schemas.register("agent", [[], [s.map_items("messages", s.rename("text", "content"))]])
            messages = [{"role": "user", "text": f"secret {i} " + "x" * 300} for i in range(40)]
            c.put_checkpoint("t", {"messages": messages}, checkpoint_id="c1", schema="agent", schema_version=1)
            want = [{"role": "user", "content": m["text"]} for m in messages]
            for _ in range(2):  # the second read is answered from what the first kept
                assert c.get_values("t", read_schema_version=2)["messages"] == want
                assert c.get_values("t")["messages"] == messages
            keys.write_text("")
            proc.reload_keys()
            for kw in ({"read_schema_version": 2}, {}):
                with expect_error(CODES.FAILED_PRECONDITION, "ENCRYPTION_KEY_MISSING", namespace=SEC):
                    c.get_values("t", **kw)
    finally:
        proc.stop()


def test_rotation_sighup_then_reencrypt_then_old_key_removed(tmp_path):
    keys = tmp_path / "keys.toml"
    keys.write_text(key_entry(SEC, "k1"))
    data = tmp_path / "data"
    proc = SidecarProcess(data, "--encryption-keys", str(keys)).start()
    try:
        with proc.client(namespace=SEC) as c:
            c.put_checkpoint("a", {"v": "before rotation", "l": ["x" * 100, "y" * 100]})
            keys.write_text(keys.read_text() + key_entry(SEC, "k2"))
            proc.reload_keys()  # rotation without a restart
            c.put_checkpoint("b", {"v": "after rotation"})
            assert c.get_values("a")["v"] == "before rotation" and c.get_values("b")["v"] == "after rotation"
    finally:
        proc.stop()
    by_key = _sealed_by_key(data)
    assert by_key[encryption.key_id(SEC, "k1")] >= 3 and by_key[encryption.key_id(SEC, "k2")] >= 1

    run = [sys.executable, "-m", "sidecar", "reencrypt", "--data-dir", str(data), "--namespace", SEC,
           "--encryption-keys", str(keys), "--batch", "2"]
    out = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"rewritten ({by_key[encryption.key_id(SEC, 'k1')]} from 'k1')" in out.stdout, out.stdout
    assert "records:" in out.stderr  # progress
    assert _sealed_by_key(data) == {encryption.key_id(SEC, "k2"): sum(by_key.values())}
    again = subprocess.run(run, capture_output=True, text=True, timeout=60)  # resumable: nothing left to do
    assert again.returncode == 0 and " 0 rewritten" in again.stdout, again.stdout

    keys.write_text(_only(keys, "k2"))
    proc = SidecarProcess(data, "--encryption-keys", str(keys)).start()
    try:
        with proc.client(namespace=SEC) as c:
            assert c.get_values("a") == {"v": "before rotation", "l": ["x" * 100, "y" * 100]}
            assert c.get_values("b")["v"] == "after rotation"
    finally:
        proc.stop()
    # a serving sidecar's directory is refused
    proc = SidecarProcess(data, "--encryption-keys", str(keys)).start()
    try:
        busy = subprocess.run(run, capture_output=True, text=True, timeout=60)
        assert busy.returncode == 2 and "in use by a serving sidecar" in busy.stderr
    finally:
        proc.stop()


def _only(keys: Path, name: str) -> str:
    """The key file's text with only the entry ``name``."""
    parts = [p for p in keys.read_text().split("[[key]]") if p.strip()]
    return "".join("[[key]]" + p for p in parts if f'id = "{name}"' in p)


def _sealed_by_key(data: Path) -> dict[bytes, int]:
    env, dbs = raw_env(data)
    try:
        out: dict[bytes, int] = {}
        with env.begin() as txn:
            for _, rec in txn.cursor(db=dbs["nodes"]):
                if encryption.is_sealed(rec):
                    kid = encryption.key_id_of(rec)
                    out[kid] = out.get(kid, 0) + 1
        return out
    finally:
        env.close()


def test_wrong_key_material_refused_at_start_and_tampering_detected(tmp_path):
    keys = tmp_path / "keys.toml"
    material = os.urandom(32)
    keys.write_text(key_entry(SEC, "k1", material))
    data = tmp_path / "data"
    proc = SidecarProcess(data, "--encryption-keys", str(keys)).start()
    try:
        with proc.client(namespace=SEC) as c:
            c.put_checkpoint("t", {"v": "x" * 500})
    finally:
        proc.stop()
    other = os.urandom(32)
    keys.write_text(key_entry(SEC, "k1", other))  # the same id, other key material
    out = subprocess.run([sys.executable, "-m", "sidecar", "serve", "--data-dir", str(data), "--listen",
                          f"unix:{data}/s.sock", "--encryption-keys", str(keys)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "'k1'" in out.stderr and "other key material" in out.stderr, out.stderr
    assert base64.b64encode(other).decode() not in out.stderr + out.stdout

    keys.write_text(key_entry(SEC, "k1", material))
    env, dbs = raw_env(data, write=True)
    with env.begin(write=True) as txn:  # one ciphertext byte of the sealed value changes on disk
        for node_id, rec in txn.cursor(db=dbs["nodes"]):
            if encryption.is_sealed(rec):
                rec = bytearray(rec)
                rec[-1] ^= 0x40
                txn.put(node_id, bytes(rec), db=dbs["nodes"])
    env.close()
    proc = SidecarProcess(data, "--encryption-keys", str(keys)).start()
    try:
        with proc.client(namespace=SEC) as c:
            with expect_error(CODES.DATA_LOSS, "ENCRYPTED_RECORD_INVALID", namespace=SEC, key_id="k1"):
                c.get_values("t")
            assert any("does not authenticate" in p for p in c.check_integrity().problems)
    finally:
        proc.stop()
    report = verify.verify_path(str(data), keys=encryption.load(str(keys)))
    assert not report.clean and any("does not authenticate" in d.problem for d in report.damaged)


def test_dedup_stays_inside_an_encrypted_namespace_and_gc_follows(tmp_path):
    keys = tmp_path / "keys.toml"
    keys.write_text(key_entry(SEC, "k1") + key_entry("sec-2", "k1"))
    data = tmp_path / "data"
    blob = random.Random(9).randbytes(200_000)
    proc = SidecarProcess(data, "--encryption-keys", str(keys)).start()
    try:
        added = {}
        for ns in (OPEN, "open-2", SEC, "sec-2"):
            with proc.client(namespace=ns) as c:
                c.create_thread("t")
                added[ns] = c.artifacts.upload("t", "f", blob).new_bytes
                added[ns + " again"] = c.artifacts.upload("t", "g", blob).new_bytes
        assert added[OPEN] > 200_000
        assert added["open-2"] == 0  # unencrypted namespaces share storage (and so reveal it: docs/security.md)
        assert added[SEC] > 200_000 and added["sec-2"] > 200_000  # nothing found in another namespace
        assert added[SEC + " again"] == 0 and added["sec-2 again"] == 0  # deduplicated inside the namespace
        with proc.client(namespace=SEC) as c:
            c.put_checkpoint("t", {"v": "value"})
            c.delete_thread("t")
            assert c.collect_garbage().freed_blobs > 0
            assert c.check_integrity().problems == []
    finally:
        proc.stop()
    env, dbs = raw_env(data)
    try:
        prefix = encryption.scope_prefix(SEC)
        with env.begin() as txn:
            tag = prefix + SEC.encode()
            assert not [k for k, v in txn.cursor(db=dbs["nodescope"]) if bytes(v) == tag]
            lengths = {len(k) for k in txn.cursor(db=dbs["hashes"]).iternext(values=False)}
            assert not [k for k in txn.cursor(db=dbs["hashes"]).iternext(values=False)
                        if len(k) in (24, 40) and bytes(k).startswith(prefix)]
            assert 24 in lengths  # sec-2's nodes are indexed under its scope
    finally:
        env.close()
    report = verify.verify_path(str(data), keys=encryption.load(str(keys)))
    assert report.clean and report.sealed.get("sec-2", 0) > 5 and not report.key_missing


def test_reencrypt_online_through_the_admin_rpc(tmp_path):
    """ReencryptNamespace: rotation finished without a restart; bad requests change nothing."""
    keys = tmp_path / "keys.toml"
    keys.write_text(key_entry(SEC, "k1"))
    data = tmp_path / "data"
    proc = SidecarProcess(data, "--encryption-keys", str(keys)).start()
    try:
        with proc.client(namespace=SEC) as c:
            for i in range(5):
                c.put_checkpoint(f"t{i}", {"v": f"value {i} " * 20, "l": [f"item {i}", f"item {i}b"]})
            with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="namespace"):
                _reencrypt(c, admin_pb2.ReencryptNamespaceRequest(namespace=OPEN))
            with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="batch_size"):
                _reencrypt(c, admin_pb2.ReencryptNamespaceRequest(namespace=SEC, batch_size=10**6))
            keys.write_text(keys.read_text() + key_entry(SEC, "k2"))
            proc.reload_keys()
            c.put_checkpoint("new", {"v": "under k2"})
            r = _reencrypt(c, admin_pb2.ReencryptNamespaceRequest(namespace=SEC, batch_size=3))
            assert r.key_id == "k2" and r.rewritten >= 10 and r.already_current >= 1 and r.structure_nodes >= 5
            assert (r.key_missing, r.damaged) == (0, 0)
            again = _reencrypt(c, admin_pb2.ReencryptNamespaceRequest(namespace=SEC))
            assert again.rewritten == 0 and again.already_current == r.rewritten + r.already_current
            keys.write_text(_only(keys, "k2"))  # the old key goes, still without a restart
            proc.reload_keys()
            for i in range(5):
                assert c.get_values(f"t{i}") == {"v": f"value {i} " * 20, "l": [f"item {i}", f"item {i}b"]}
    finally:
        proc.stop()
    assert set(_sealed_by_key(data)) == {encryption.key_id(SEC, "k2")}


def _reencrypt(c, req):
    return c._call(c.admin.ReencryptNamespace, req, None)  # (the client's error mapping)


def test_a_namespace_that_gets_a_key_later_keeps_its_old_values_and_seals_new_ones(tmp_path):
    data = tmp_path / "data"
    early, late = marker("early"), marker("late")
    proc = SidecarProcess(data).start()
    try:
        with proc.client(namespace=SEC) as c:
            first = c.put_checkpoint("t", {"l": [early], "m": {"a": early}})
    finally:
        proc.stop()
    keys = tmp_path / "keys.toml"
    keys.write_text(key_entry(SEC, "k1"))
    proc = SidecarProcess(data, "--encryption-keys", str(keys)).start()
    try:
        with proc.client(namespace=SEC) as c:
            c.put_checkpoint("t", {"l": Append([late]), "m": SetKeys({"b": late})},
                             parent_id=first.checkpoint.checkpoint_id)
            assert c.get_values("t") == {"l": [early, late], "m": {"a": early, "b": late}}
            assert c.check_integrity().problems == []
    finally:
        proc.stop()
    assert "data.mdb" in files_contain(data, early)  # written before the key: stays as it was (docs/security.md)
    assert files_contain(data, late) == []
    assert verify.verify_path(str(data), keys=encryption.load(str(keys))).clean


def test_encryption_key_command_appends_entries_to_a_private_file(tmp_path):
    path = tmp_path / "keys.toml"
    for name in ("k1", "k2"):
        out = subprocess.run([sys.executable, "-m", "sidecar", "encryption-key", "--namespace", SEC, "--id", name,
                              "--append", str(path)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stdout == "", out.stderr
    assert path.stat().st_mode & 0o777 == 0o600
    ring = encryption.parse(path.read_text())
    assert [k.name for k in ring.keys[SEC]] == ["k1", "k2"] and ring.scope(SEC).current.name == "k2"
    printed = subprocess.run([sys.executable, "-m", "sidecar", "encryption-key", "--namespace", OPEN, "--id", "x"],
                             capture_output=True, text=True, timeout=60).stdout
    assert encryption.parse(printed).scope(OPEN).current.name == "x" and printed not in path.read_text()
