"""server: builds and runs the gRPC server around one store.

Defaults (no flags): data in ./sidecar-data, listening on the unix socket
./sidecar-data/sidecar.sock (mode 0600) and on 127.0.0.1:7421. Health
checking (grpc.health.v1) and server reflection are always on. SIGTERM and
SIGINT drain in-flight calls, stop the writer and close LMDB.
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from agentstate.v1 import (admin_pb2, artifacts_pb2, conversations_pb2, effects_pb2, events_pb2, runs_pb2,
                           threads_pb2)

from . import limits
from .api import context, service
from .api.sweeper import Sweeper
from .api.watchdog import Watchdog, extend_leases_after_restart
from .state import artifacts
from .storage import gc, hotpath
from .storage import store as store_mod
from .storage.store import Store

log = logging.getLogger("sidecar.server")

DEFAULT_DATA_DIR = "sidecar-data"
DEFAULT_TCP = "127.0.0.1:7421"
SOCKET_NAME = "sidecar.sock"
SERVICES = (
    (threads_pb2, "ThreadService"),
    (admin_pb2, "AdminService"),
    (runs_pb2, "RunService"),
    (events_pb2, "EventService"),
    (artifacts_pb2, "ArtifactService"),
    (effects_pb2, "EffectService"),
    (conversations_pb2, "ConversationService"),
)
SERVICE_NAMES = tuple(module.DESCRIPTOR.services_by_name[name].full_name for module, name in SERVICES)


@dataclass
class Config:
    data_dir: str = DEFAULT_DATA_DIR
    listen: list[str] = field(default_factory=list)
    map_size: int | None = None
    grace_seconds: float = 10.0
    gc_delay_seconds: float = 2.0
    lease_timeout_seconds: float = context.DEFAULT_LEASE_MS / 1000  # runs that do not set their own
    watchdog_interval_seconds: float = 1.0  # how often due leases and run timeouts are looked for
    durability: str = "sync"  # "sync" or "process" (see store.py)
    commit_interval_seconds: float = store_mod.COMMIT_INTERVAL  # process mode: synced LMDB commits at least this often
    max_queue: int = store_mod.MAX_QUEUE  # writes in flight before writers get OVERLOADED
    compress: bool = True  # value nodes stored zstd-compressed (compression.py)
    sweep_interval_seconds: float = 1.0  # how often conversations' idle timers are looked at (api/sweeper.py)
    clock: object = None  # the store's wall clock in microseconds (tests inject one; None: the real clock)

    def addresses(self) -> list[str]:
        return self.listen or [f"unix:{os.path.join(os.path.abspath(self.data_dir), SOCKET_NAME)}", DEFAULT_TCP]


class DataDirLocked(RuntimeError):
    pass


class Sidecar:
    """A running sidecar: store, garbage collector and gRPC server."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.store: Store | None = None
        self.server: grpc.aio.Server | None = None
        self.collector: gc.GarbageCollector | None = None
        self.ctx: context.Ctx | None = None
        self.watchdog: Watchdog | None = None
        self.sweeper: Sweeper | None = None
        self.health = health.aio.HealthServicer()
        self._lock_fd: int | None = None
        self.bound: list[str] = []

    def _lock_data_dir(self) -> None:
        os.makedirs(self.config.data_dir, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(self.config.data_dir, "sidecar.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirLocked(f"{self.config.data_dir} is in use by another sidecar") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    async def start(self) -> None:
        self._lock_data_dir()
        self.store = Store(self.config.data_dir, map_size=self.config.map_size, durability=self.config.durability,
                           commit_interval=self.config.commit_interval_seconds, max_queue=self.config.max_queue,
                           loop=asyncio.get_running_loop(), compress=self.config.compress,
                           clock=self.config.clock)
        self.collector = gc.GarbageCollector(self.store, delay=self.config.gc_delay_seconds)
        self.server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", limits.MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", limits.MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ])
        self.ctx = context.Ctx(self.store, context.Hub(), self.collector.soon,
                                round(self.config.lease_timeout_seconds * 1000))
        extended = extend_leases_after_restart(self.store)
        dropped = artifacts.drop_stale_uploads(self.store)
        if dropped:
            self.collector.soon()
        if extended or dropped:
            log.info("startup: %d running leases extended, %d unfinished uploads dropped", extended, dropped)
        servicers = {
            "ThreadService": service.ThreadService(self.store, self.collector, self.ctx),
            "AdminService": service.AdminService(self.store, self.collector),
            "RunService": service.RunService(self.ctx),
            "EventService": service.EventService(self.ctx),
            "ArtifactService": service.ArtifactService(self.ctx),
            "EffectService": service.EffectService(self.ctx),
            "ConversationService": service.ConversationService(self.ctx),
        }
        for module, name in SERVICES:
            service.add_to_server(servicers[name], module.DESCRIPTOR.services_by_name[name], self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME),
                                            self.server)
        sockets = []
        for addr in self.config.addresses():
            if addr.startswith("unix:"):
                path = addr[len("unix:"):]
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # stale socket of a killed sidecar (we hold the data-dir lock)
                sockets.append(path)
            old_umask = os.umask(0o177) if addr.startswith("unix:") else None
            try:
                port = self.server.add_insecure_port(addr)
            finally:
                if old_umask is not None:
                    os.umask(old_umask)
            if not addr.startswith("unix:") and port == 0:
                raise OSError(f"cannot listen on {addr}")
            self.bound.append(addr if addr.startswith("unix:") or not addr.endswith(":0")
                              else f"{addr.rsplit(':', 1)[0]}:{port}")
        await self.server.start()
        self.watchdog = Watchdog(self.ctx, self.config.watchdog_interval_seconds)
        self.watchdog.start()
        self.sweeper = Sweeper(self.ctx, self.config.sweep_interval_seconds)
        self.sweeper.start()
        for path in sockets:
            os.chmod(path, 0o600)
        for name in (*SERVICE_NAMES, ""):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("sidecar serving %s (data %s, durability %s, native hot path: %s%s)", ", ".join(self.bound),
                 os.path.abspath(self.config.data_dir), self.config.durability, hotpath.NATIVE,
                 f", replayed {self.store.replayed} log records" if self.store.replayed else "")

    async def stop(self) -> None:
        if self.ctx is not None:
            self.ctx.hub.close()  # open watches and claim waits end now (UNAVAILABLE): clients resume later
        if self.server is not None:
            await self.health.enter_graceful_shutdown()
            await self.server.stop(self.config.grace_seconds)
        if self.watchdog is not None:
            await self.watchdog.stop()
        if self.sweeper is not None:
            await self.sweeper.stop()
        if self.collector is not None:
            self.collector.cancel()
        if self.store is not None:
            self.store.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        for addr in self.config.addresses():
            if addr.startswith("unix:"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(addr[len("unix:"):])
        log.info("sidecar stopped")


async def serve(config: Config) -> None:
    sidecar = Sidecar(config)
    await sidecar.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"sidecar ready: {' '.join(sidecar.bound)}", flush=True)
    await stop.wait()
    await sidecar.stop()
