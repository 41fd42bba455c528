"""Artifacts: versions, provenance, the official mark, streaming upload and download (a 50 MB round
trip), content-defined chunking shared with the store (identical or nearly identical files cost almost
nothing, the root equals the core's value hash), failed uploads store nothing, and garbage collection."""
from __future__ import annotations

import hashlib
import random
import uuid

import grpc
import pytest
from conftest import SidecarProcess, expect_error

from agentstate import codec
from agentstate.v1 import artifacts_pb2 as apb
from sidecar.storage import hotpath as hp
CODES = grpc.StatusCode
MB = 1024 * 1024


@pytest.fixture(scope="module")
def art_sidecar(tmp_path_factory):
    proc = SidecarProcess(tmp_path_factory.mktemp("artifacts") / "data").start()
    yield proc
    proc.stop()


@pytest.fixture
def c(art_sidecar):
    with art_sidecar.client(namespace=f"ns-{uuid.uuid4().hex[:12]}", timeout=300) as client:
        yield client


def data_of(size: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(size)


def value_root(data: bytes) -> bytes:
    """What the core's write path gives for the value "these bytes"."""
    return hp.value_node(codec.encode(data), [])


def test_versions_provenance_and_official(c):
    a = c.runs.start("t", create_thread=True)
    v1 = c.artifacts.upload("t", "report.md", b"# one", content_type="text/markdown", run_id=a.run_id,
                            step_id="s1", metadata={"lang": "en"}).artifact
    a.complete()
    b = c.runs.start("t")
    v2 = c.artifacts.upload("t", "report.md", b"# two", run_id=b.run_id).artifact
    other = c.artifacts.upload("t", "data.csv", b"a,b\n1,2\n").artifact
    assert (v1.version, v2.version, other.version) == (1, 2, 1)
    assert (v1.run_id, v1.step_id, v1.size, v1.content_type) == (a.run_id, "s1", 5, "text/markdown")
    assert c.artifacts.download("t", "report.md")[1] == b"# two"  # latest by default
    c.artifacts.set_official("t", "report.md", 1)
    art, data = c.artifacts.download("t", "report.md")
    assert (art.version, art.official, data) == (1, True, b"# one")  # the official one wins
    assert c.artifacts.download("t", "report.md", version=2)[1] == b"# two"
    assert [(x.name, x.version, x.official) for x in c.artifacts.list("t")] == \
        [("data.csv", 1, False), ("report.md", 1, True), ("report.md", 2, False)]
    assert [x.version for x in c.artifacts.list("t", run_id=b.run_id)] == [2]
    assert [x.version for x in c.artifacts.list("t", name="report.md", page_size=1)] == [1, 2]
    assert c.artifacts.set_official("t", "report.md", 0) is None
    assert c.artifacts.get("t", "report.md").version == 2
    with expect_error(CODES.NOT_FOUND, "ARTIFACT_NOT_FOUND", field="version"):
        c.artifacts.get("t", "report.md", version=3)
    with expect_error(CODES.NOT_FOUND, "ARTIFACT_NOT_FOUND", field="name"):
        c.artifacts.download("t", "nope")
    assert "agentstate.artifact.created" in [e.type for e in c.events.list("t")]


@pytest.mark.parametrize("size", [0, 10, 65_535, 65_536, 300_000, 9 * MB])
def test_stored_like_any_value(c, size):
    """The streamed chunking gives exactly the core's hash of the whole value (small and multi-batch)."""
    c.create_thread("t")
    data = data_of(size, seed=size)
    art = c.artifacts.upload("t", "f", data, expected_size=size).artifact
    assert art.content_root == value_root(data) and art.size == size
    assert c.artifacts.download("t", "f")[1] == data


def test_identical_and_nearly_identical_files_cost_almost_nothing(c):
    c.create_thread("t")
    data = data_of(3 * MB, seed=7)
    first = c.artifacts.upload("t", "big.bin", data)
    assert first.new_bytes > 3 * MB
    same = c.artifacts.upload("t", "big-copy.bin", data)
    assert same.new_bytes == 0 and same.artifact.content_root == first.artifact.content_root
    edited = bytearray(data)
    edited[MB + 123] ^= 0xFF  # one byte in the middle
    near = c.artifacts.upload("t", "big.bin", bytes(edited))
    assert near.artifact.version == 2
    assert near.new_bytes < 200_000, near.new_bytes  # about one chunk and the chunk list, not 3 MB
    assert c.artifacts.download("t", "big.bin")[1] == bytes(edited)


def test_round_trip_of_a_50_mb_file(c, tmp_path):
    c.create_thread("t")
    src = tmp_path / "src.bin"
    rng = random.Random(50)
    block = rng.randbytes(MB)
    with open(src, "wb") as f:
        for i in range(50):  # mostly distinct content: every MB differs
            f.write(bytes(b ^ (i * 37 % 256) for b in block[:4096]) + block[4096:])
    want = hashlib.sha256(src.read_bytes()).hexdigest()
    with open(src, "rb") as f:
        art = c.artifacts.upload("t", "fifty.bin", f, expected_size=50 * MB).artifact
    assert art.size == 50 * MB
    out = tmp_path / "out.bin"
    with open(out, "wb") as f:
        got, _ = c.artifacts.download("t", "fifty.bin", f)
    assert got.version == 1
    assert hashlib.sha256(out.read_bytes()).hexdigest() == want


def test_failed_uploads_store_nothing(c, art_sidecar):
    c.create_thread("t")
    with expect_error(CODES.NOT_FOUND, "THREAD_NOT_FOUND", field="header.thread_id"):
        c.artifacts.upload("missing", "f", b"x")
    with expect_error(CODES.NOT_FOUND, "RUN_NOT_FOUND", field="header.run_id"):
        c.artifacts.upload("t", "f", b"x", run_id="no-such-run")
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="header.name"):
        c.artifacts.upload("t", "", b"x")
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="header.expected_size"):
        c.artifacts.upload("t", "f", data_of(9 * MB, seed=3), expected_size=1)  # fails after staging chunks
    stub = c.artifacts.stub
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="header"):
        c._call(stub.UploadArtifact, iter([apb.UploadArtifactRequest(data=b"no header first")]), None)
    header = apb.UploadArtifactHeader(namespace=c.namespace, thread_id="t", name="f")
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="header"):
        c._call(stub.UploadArtifact, iter([apb.UploadArtifactRequest(header=header)] * 2), None)
    assert list(c.artifacts.list("t")) == []
    # a body that does not parse, mid-stream: INVALID_ARGUMENT, never UNKNOWN
    with grpc.insecure_channel(art_sidecar.address) as ch:
        call = ch.stream_unary("/agentstate.v1.ArtifactService/UploadArtifact", request_serializer=None,
                               response_deserializer=None)
        good = apb.UploadArtifactRequest(header=header).SerializeToString()
        with pytest.raises(grpc.RpcError) as info:
            call(iter([good, b"\x12\xff\xff\xff"]), timeout=30)
        assert info.value.code() == CODES.INVALID_ARGUMENT
    assert list(c.artifacts.list("t")) == []


def test_garbage_collection_keeps_artifacts_and_frees_deleted_ones(tmp_path):
    proc = SidecarProcess(tmp_path / "data").start()
    try:
        with proc.client(timeout=120) as c:
            c.create_thread("t")
            c.create_thread("keep")
            data = data_of(2 * MB, seed=11)
            c.artifacts.upload("t", "a", data)
            c.artifacts.upload("keep", "b", data_of(MB, seed=12))
            with pytest.raises(Exception):
                c.artifacts.upload("t", "x", data_of(9 * MB, seed=13), expected_size=5)  # staged, then dropped
            c.collect_garbage()
            after_failed = c.store_stats().blob_bytes
            assert after_failed < 4 * MB  # the failed upload's chunks were reclaimed
            assert c.check_integrity().missing_blobs == 0
            assert c.artifacts.download("t", "a")[1] == data
            c.delete_thread("t")
            freed = c.collect_garbage()
            assert freed.freed_bytes > 2 * MB
            assert c.artifacts.download("keep", "b")[1] == data_of(MB, seed=12)
            assert c.check_integrity().missing_blobs == 0
    finally:
        proc.stop()
