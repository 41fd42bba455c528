"""The `sidecar serve` command: defaults, listeners, health, reflection, signals, data-dir locking.

Tests that need the fixed default port 127.0.0.1:7421 take a machine-wide file lock first
(other checkouts may run this suite at the same time) and wait for the port to be free.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import grpc
import lmdb
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from agentstate import Client
from agentstate.v1 import threads_pb2 as pb

DEFAULT_PORT = 7421
SERVICES = ("agentstate.v1.ThreadService", "agentstate.v1.AdminService")
COMMAND = [shutil.which("sidecar", path=str(Path(sys.executable).parent)) or "sidecar"]
WAIT = 30.0  # seconds any one thing may take before the test gives up (a hang, not a timing check)


class Serve:
    """One `sidecar serve` process, started in ``cwd`` with ``args``; stdout and stderr go to files."""

    def __init__(self, cwd: Path, *args: str) -> None:
        self.cwd = Path(cwd)
        self.cwd.mkdir(parents=True, exist_ok=True)
        self.args = args
        self.proc: subprocess.Popen | None = None
        n = len(list(self.cwd.glob("serve-*.out")))
        self.out_path = self.cwd / f"serve-{n}.out"
        self.err_path = self.cwd / f"serve-{n}.err"

    def spawn(self) -> "Serve":
        old = os.umask(0)  # the most permissive umask: the modes below must not depend on the caller's
        try:
            with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
                self.proc = subprocess.Popen([*COMMAND, "serve", "--log-level", "DEBUG", *self.args],
                                             cwd=self.cwd, stdout=out, stderr=err)
        finally:
            os.umask(old)
        return self

    def start(self) -> list[str]:
        """Spawn and wait for the ready line; returns the addresses it lists."""
        self.spawn()
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            for line in self.out_path.read_text().splitlines():
                if line.startswith("sidecar ready: "):
                    return line[len("sidecar ready: "):].split()
            if self.proc.poll() is not None:
                raise AssertionError(f"sidecar exited with {self.proc.returncode}:\n{self.output()}")
            time.sleep(0.05)
        raise AssertionError(f"sidecar not ready:\n{self.output()}")

    def output(self) -> str:
        return self.out_path.read_text(errors="replace") + self.err_path.read_text(errors="replace")

    def wait(self) -> int:
        return self.proc.wait(WAIT)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(WAIT)


@pytest.fixture
def serve(tmp_path):
    started: list[Serve] = []

    def make(*args: str, cwd: Path | None = None) -> Serve:
        s = Serve(cwd or tmp_path, *args)
        started.append(s)
        return s

    yield make
    for s in started:
        s.kill()


@pytest.fixture
def default_port():
    """Hold the machine-wide lock for 127.0.0.1:7421 and wait until nothing listens there."""
    with open(Path("/tmp") / f"agentstate-sidecar-test-port-{DEFAULT_PORT}.lock", "a+") as lock:
        deadline = time.monotonic() + 300
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, "another test run held the port lock for 5 minutes"
                time.sleep(0.2)
        deadline = time.monotonic() + WAIT
        while not _port_free(DEFAULT_PORT):
            assert time.monotonic() < deadline, f"something else listens on 127.0.0.1:{DEFAULT_PORT}"
            time.sleep(0.2)
        yield DEFAULT_PORT


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def health_status(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=WAIT).status


def reflected_services(address: str) -> set[str]:
    with grpc.insecure_channel(address) as ch:
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        responses = stub.ServerReflectionInfo(iter([
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="agentstate.v1.ThreadService"),
        ]), timeout=WAIT)
        listed, described = next(responses), next(responses)
    assert described.file_descriptor_response.file_descriptor_proto, "no descriptor for ThreadService"
    return {s.name for s in listed.list_services_response.service}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ---------------------------------------------------------------- defaults

def test_serve_without_flags(serve, tmp_path, default_port):
    cwd = tmp_path / "cwd"
    s = serve(cwd=cwd)
    addresses = s.start()
    data = cwd / "sidecar-data"
    sock = data / "sidecar.sock"
    assert addresses == [f"unix:{sock}", f"127.0.0.1:{DEFAULT_PORT}"]
    assert data.is_dir() and mode(data) == 0o700
    assert stat.S_ISSOCK(sock.stat().st_mode) and mode(sock) == 0o600
    for f in ("data.mdb", "lock.mdb"):
        assert mode(data / f) == 0o600, f

    tcp = f"127.0.0.1:{DEFAULT_PORT}"
    for address in (f"unix:{sock}", tcp):
        for service in ("", *SERVICES):
            assert health_status(address, service) == health_pb2.HealthCheckResponse.SERVING
        assert reflected_services(address) >= {*SERVICES, "grpc.health.v1.Health"}
    # both listeners serve the same store
    with Client(tcp) as c:
        c.put_checkpoint("over-tcp", {"v": 1})
    with Client(f"unix:{sock}") as c:
        assert c.get_values("over-tcp") == {"v": 1}

    s.signal(signal.SIGTERM)
    assert s.wait() == 0, s.output()
    assert not sock.exists()
    assert _port_free(DEFAULT_PORT)


def test_listen_is_repeatable(serve, tmp_path):
    data = tmp_path / "data"
    a, b = tmp_path / "a.sock", tmp_path / "b.sock"
    s = serve("--data-dir", str(data), "--listen", f"unix:{a}", "--listen", f"unix:{b}", "--listen", "127.0.0.1:0")
    addresses = s.start()
    assert addresses[:2] == [f"unix:{a}", f"unix:{b}"] and len(addresses) == 3
    host, port = addresses[2].rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    assert not (data / "sidecar.sock").exists()  # the listeners given replace the defaults
    for path in (a, b):
        assert mode(path) == 0o600
    for i, address in enumerate(addresses):
        assert health_status(address) == health_pb2.HealthCheckResponse.SERVING
        with Client(address) as c:
            c.put_checkpoint("shared", {"n": i}, checkpoint_id=f"c{i}")
    with Client(addresses[0]) as c:
        assert [cp.checkpoint_id for cp in c.list_checkpoints("shared")] == ["c2", "c1", "c0"]
    assert reflected_services(addresses[1]) >= {*SERVICES, "grpc.health.v1.Health",
                                                "grpc.reflection.v1alpha.ServerReflection"}
    s.signal(signal.SIGTERM)
    assert s.wait() == 0, s.output()
    assert not a.exists() and not b.exists()


# ---------------------------------------------------------------- signals

FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())


def writer_blocked_on_lmdb(pid: int) -> bool:
    """True when a thread of ``pid`` sleeps in futex() on an address inside lock.mdb, i.e. waits for
    LMDB's writer mutex (which the test holds)."""
    assert FUTEX is not None, f"no futex syscall number known for {platform.machine()}"
    ranges = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[5].endswith("/lock.mdb"):
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            ranges.append((lo, hi))
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            fields = (task / "syscall").read_text().split()
            if fields and fields[0] == str(FUTEX) and any(lo <= int(fields[1], 16) < hi for lo, hi in ranges):
                return True
    return False


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.02)


def draining(channel: grpc.Channel) -> bool:
    try:
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=WAIT).status
    except grpc.RpcError:
        return True  # no longer taking calls
    return status == health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_drains_in_flight_calls(serve, tmp_path, sig):
    data = tmp_path / "data"
    sock = data / "sidecar.sock"
    s = serve("--data-dir", str(data), "--listen", f"unix:{sock}")
    s.start()
    with Client(f"unix:{sock}") as c:
        c.put_checkpoint("t", {"v": 0}, checkpoint_id="before")
        env = lmdb.open(str(data), max_dbs=16, map_size=1 << 20)
        try:
            txn = env.begin(write=True)  # LMDB's writer mutex: the sidecar's next commit waits for it
            try:
                req = pb.PutCheckpointRequest(namespace="default", thread_id="t", checkpoint_id="in-flight")
                req.channels["v"].value.msgpack = b"\x01"
                call = c.threads.PutCheckpoint.future(req, timeout=WAIT * 2)
                wait_for(lambda: writer_blocked_on_lmdb(s.proc.pid), "the put to reach the writer")
                s.signal(sig)
                wait_for(lambda: draining(c.channel), "the sidecar to start draining")
                assert not call.done(), "the in-flight call ended before its write could commit"
                assert s.proc.poll() is None
            finally:
                txn.abort()
        finally:
            env.close()
        assert call.result().created  # the drained call completed
    assert s.wait() == 0, s.output()
    assert not sock.exists()
    # and its write was committed
    again = serve("--data-dir", str(data), "--listen", f"unix:{sock}")
    again.start()
    with Client(f"unix:{sock}") as c:
        assert [cp.checkpoint_id for cp in c.list_checkpoints("t")] == ["in-flight", "before"]
    again.signal(signal.SIGTERM)
    assert again.wait() == 0


# ---------------------------------------------------------------- data-dir lock, stale socket

def test_second_sidecar_on_the_same_data_dir_exits(serve, tmp_path, default_port):
    data = tmp_path / "data"
    sock = data / "sidecar.sock"
    first = serve("--data-dir", str(data), "--listen", f"unix:{sock}")
    first.start()
    for args in (("--listen", f"unix:{tmp_path / 'other.sock'}"), ()):  # () = the defaults, incl. the same socket
        second = serve("--data-dir", str(data), *args).spawn()
        code = second.wait()
        assert code != 0, second.output()
        err = second.err_path.read_text()
        assert "in use by another sidecar" in err and str(data) in err, err
        assert "Traceback" not in second.output()
    # the first one is unharmed: its socket is still there and it serves
    assert stat.S_ISSOCK(sock.stat().st_mode)
    assert health_status(f"unix:{sock}") == health_pb2.HealthCheckResponse.SERVING
    assert not (tmp_path / "other.sock").exists()
    first.signal(signal.SIGTERM)
    assert first.wait() == 0


def test_stale_socket_of_a_killed_sidecar(serve, tmp_path):
    data = tmp_path / "data"
    sock = data / "sidecar.sock"
    s = serve("--data-dir", str(data), "--listen", f"unix:{sock}")
    s.start()
    with Client(f"unix:{sock}") as c:
        c.put_checkpoint("t", {"v": "acknowledged"}, checkpoint_id="c1")
    s.proc.send_signal(signal.SIGKILL)
    s.proc.wait(WAIT)
    assert stat.S_ISSOCK(sock.stat().st_mode), "SIGKILL should leave the socket file behind"
    with pytest.raises(grpc.FutureTimeoutError), grpc.insecure_channel(f"unix:{sock}") as ch:
        grpc.channel_ready_future(ch).result(timeout=0.5)  # nobody answers on it

    again = serve("--data-dir", str(data), "--listen", f"unix:{sock}")
    again.start()
    assert health_status(f"unix:{sock}") == health_pb2.HealthCheckResponse.SERVING
    assert mode(sock) == 0o600
    with Client(f"unix:{sock}") as c:
        assert c.get_values("t", "c1") == {"v": "acknowledged"}
        assert c.check_integrity().missing_blobs == 0
    again.signal(signal.SIGTERM)
    assert again.wait() == 0
