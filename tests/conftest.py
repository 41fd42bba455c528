"""Shared fixtures: sidecar processes, clients, and the two hot-path implementations."""
from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import grpc
import pytest

from agentstate import AgentStateError, Client
from agentstate.v1 import threads_pb2 as pb

ROOT = Path(__file__).resolve().parent.parent


class SidecarProcess:
    """A `sidecar serve` child process on a unix socket in its own data dir."""

    def __init__(self, data_dir: Path, *extra_args: str, env: dict | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.socket = self.data_dir / "sidecar.sock"
        self.address = f"unix:{self.socket}"
        self.extra_args = extra_args
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"

    def start(self, timeout: float = 20.0) -> "SidecarProcess":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sidecar", "serve", "--data-dir", str(self.data_dir),
             "--listen", self.address, *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=str(self.data_dir.parent))
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sidecar exited with {self.proc.returncode}:\n{self.log()}")
            if self.socket.exists():  # (a killed sidecar's socket stays until the new one replaces it)
                ch = grpc.insecure_channel(self.address, options=[("grpc.initial_reconnect_backoff_ms", 50),
                                                                  ("grpc.max_reconnect_backoff_ms", 200)])
                try:
                    grpc.channel_ready_future(ch).result(timeout=1)
                    return self
                except grpc.FutureTimeoutError:
                    pass
                finally:
                    ch.close()
            time.sleep(0.05)
        raise RuntimeError(f"sidecar did not start:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def reload_keys(self, timeout: float = 10.0) -> None:
        """SIGHUP (the key file read again without a restart), then wait until the log says the reload is done."""
        done = self.log().count("encryption keys reloaded")
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while self.log().count("encryption keys reloaded") <= done and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.log().count("encryption keys reloaded") > done, "the keys were not reloaded"

    def kill(self) -> None:
        """SIGKILL, no cleanup (a crash)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise
        return self.proc.returncode

    def client(self, **kw) -> Client:
        return Client(self.address, **kw)


@pytest.fixture(scope="session")
def session_tmp():
    d = Path(tempfile.mkdtemp(prefix="sidecar-tests-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def sidecar(session_tmp):
    """One sidecar shared by a test session (tests use their own thread ids)."""
    proc = SidecarProcess(session_tmp / "shared").start()
    yield proc
    proc.stop()


@pytest.fixture
def fresh_sidecar(tmp_path):
    """A sidecar with an empty store, for tests that look at the whole store."""
    proc = SidecarProcess(tmp_path / "data").start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def module_sidecar(tmp_path_factory):
    """A sidecar private to one test module, for whole-store counts that other modules must not disturb."""
    proc = SidecarProcess(tmp_path_factory.mktemp("module") / "data").start()
    yield proc
    proc.stop()


@pytest.fixture
def client(sidecar):
    with sidecar.client() as c:
        yield c


@pytest.fixture
def tid():
    """A fresh thread id."""
    return f"t-{uuid.uuid4()}"


@pytest.fixture
def ns():
    """A fresh namespace (so list calls see only what the test made)."""
    return f"ns-{uuid.uuid4().hex[:16]}"


@pytest.fixture
def nsclient(sidecar, ns):
    """A client of the shared sidecar in a namespace of its own."""
    with sidecar.client(namespace=ns) as c:
        yield c


# ---------------------------------------------------------------- helpers for API tests

@contextlib.contextmanager
def expect_error(code, reason: str, field: str | None = None, **metadata: str):
    """Expect an AgentStateError with this gRPC code, ErrorInfo reason and (optionally) metadata."""
    with pytest.raises(AgentStateError) as info:
        yield info
    err = info.value
    assert (err.code, err.reason) == (code, reason), f"{err!r}: {err.metadata}"
    if field is not None:
        assert err.field == field, f"field {err.field!r} != {field!r} ({err})"
    for key, value in metadata.items():
        assert err.metadata.get(key) == value, f"metadata[{key!r}] = {err.metadata.get(key)!r} != {value!r}"


def store_values(store, thread_id: str, checkpoint_id: str = "") -> dict:
    """The channel values of a checkpoint read straight from a Store (GetCheckpoint's handler), decoded."""
    import asyncio

    from agentstate import codec
    from sidecar.api import checkpoints
    cp = asyncio.run(checkpoints.get(store, pb.GetCheckpointRequest(thread_id=thread_id,
                                                                     checkpoint_id=checkpoint_id))).checkpoint
    out = {}
    for name, cv in cp.channels.items():
        v = cv.value
        if v.WhichOneof("kind") == "list":
            out[name] = [codec.decode(i.msgpack) for i in v.list.items]
        elif v.WhichOneof("kind") == "map":
            out[name] = {k: codec.decode(e.msgpack) for k, e in v.map.entries.items()}
        else:
            out[name] = codec.decode(v.msgpack)
    return out


def store_state(client: Client, *thread_ids: str) -> dict:
    """Everything a failed call must leave alone: store counts, and each thread with all its
    checkpoints (every checkpoint namespace, values and pending writes)."""
    stats = client.store_stats()
    state = {"stats": (stats.threads, stats.checkpoints, stats.pending_writes, stats.blobs, stats.blob_bytes)}
    for thread_id in thread_ids:
        req = pb.GetThreadRequest(namespace=client.namespace, thread_id=thread_id)
        try:
            thread = client.threads.GetThread(req).thread.SerializeToString(deterministic=True)
        except grpc.RpcError as e:
            thread = e.code()
        checkpoints = [c.SerializeToString(deterministic=True) for c in client.list_checkpoints(
            thread_id, include_values=True, include_pending_writes=True)]
        state[thread_id] = (thread, checkpoints)
    return state


def native_available() -> bool:
    try:
        importlib.import_module("sidecar.storage._hotpath_c")
        return True
    except ImportError:
        return False


@pytest.fixture(params=["native", "python"])
def impl(request):
    """Both hot-path implementations, imported directly (not through the selector)."""
    if request.param == "native":
        if not native_available():
            pytest.fail("sidecar.storage._hotpath_c is not built: run `pip install -e .` with Cython and a C compiler")
        return importlib.import_module("sidecar.storage._hotpath_c")
    return importlib.import_module("sidecar.storage._hotpath_py")


# ----------------------------------------------------------------- an in-process sidecar with a clock

class FakeClock:
    def __init__(self) -> None:
        self.now = 1_800_000_000_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1_000_000)


class InProcess:
    """A sidecar on its own event loop thread with an injected store clock; the sweeper runs when told."""

    def __init__(self, data_dir, reclaim_batch=None, **config) -> None:
        from sidecar.server import Config, Sidecar
        self.clock = FakeClock()
        self.address = f"unix:{data_dir}/s.sock"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.sidecar = Sidecar(Config(data_dir=str(data_dir), listen=[self.address], clock=self.clock,
                                      sweep_interval_seconds=3600, gc_delay_seconds=3600, **config))
        self.run(self.sidecar.start())
        if reclaim_batch:
            self.sidecar.sweeper.reclaim_batch = reclaim_batch

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def sweep(self) -> dict:
        return self.run(self.sidecar.sweeper.sweep())

    def rows(self, table: str) -> int:
        store = self.sidecar.store
        with store.read() as txn:
            return txn.stat(store.db[table])["entries"]

    def close(self) -> None:
        self.run(self.sidecar.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


