"""server: builds and runs the gRPC server around one store.

Defaults (no flags): data in ./sidecar-data, listening on the unix socket
./sidecar-data/sidecar.sock (mode 0600) and on 127.0.0.1:7421. Health
checking (grpc.health.v1) and server reflection are always on. SIGTERM and
SIGINT drain in-flight calls, stop the writer and close LMDB.

Access (docs/security.md): ``auth_file`` turns on bearer tokens for every
call (api/auth.py), reloaded on SIGHUP; ``tls_cert``/``tls_key`` serve TCP
listeners over TLS, ``tls_client_ca`` requires client certificates signed by
that CA (mutual TLS). A TCP listener on an address that is not loopback
needs TLS and a credential check (tokens or client certificates), or
``insecure`` said explicitly. Unix sockets are created 0600; the data
directory is kept 0700.
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import logging
import os
import signal
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from agentstate.v1 import retention_pb2
from agentstate.v1 import (admin_pb2, artifacts_pb2, conversations_pb2, effects_pb2, events_pb2, memory_pb2, runs_pb2,
                           threads_pb2)
from agentstate.v1 import schemas_pb2
from agentstate.v1 import transfer_pb2

from . import __version__, limits
from .api import auth, callguard, context, fairness, memory, service
from .api.sweeper import Sweeper
from .metrics import Metrics
from .api.watchdog import Watchdog, extend_leases_after_restart
from .state import artifacts
from .storage import backup, encryption, gc, hotpath
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
    (memory_pb2, "MemoryService"),
    (conversations_pb2, "ConversationService"),
    (retention_pb2, "RetentionService"),
    (schemas_pb2, "SchemaService"),
    (transfer_pb2, "TransferService"),
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
    backup_dir: str | None = None  # where BackupStore and scheduled backups go (default: <data dir>-backups)
    backup_interval_seconds: float = 0.0  # scheduled backups this often (0: none)
    backup_keep: int = 7  # scheduled backups kept (the oldest time-named ones beyond it are deleted)
    auth_file: str | None = None  # bearer tokens (api/auth.py); None: no credential checks
    tls_cert: str | None = None  # PEM certificate chain of the TCP listeners
    tls_key: str | None = None
    tls_client_ca: str | None = None  # PEM CA bundle: client certificates required (mutual TLS)
    insecure: bool = False  # allow a non-loopback TCP listener without TLS and credentials
    metrics_listen: str | None = None  # HOST:PORT of the Prometheus endpoint (metrics.py); off when None
    http_listen: str | None = None  # HOST:PORT (or PORT: loopback) of the web inspector (web.py); off when None
    memory_sweep_interval_seconds: float = 60.0  # how often expired memory items are swept (0: never)
    sweep_interval_seconds: float = 1.0  # how often conversations' idle timers are looked at (api/sweeper.py)
    retention_interval_seconds: float = 60.0  # how often the sweeper applies retention policies (0: on request)
    clock: object = None  # the store's wall clock in microseconds (tests inject one; None: the real clock)
    # resource limits (api/callguard.py, docs/security.md "Limits")
    max_streams_per_connection: int = callguard.DEFAULT_MAX_STREAMS  # HTTP/2 (0: gRPC's); more wait in the client
    max_calls_per_connection: int = callguard.DEFAULT_MAX_CALLS  # TCP: more are refused TOO_MANY_CALLS (0: off)
    max_message_bytes: int = limits.MAX_MESSAGE_BYTES  # one request or response
    default_deadline_seconds: float = callguard.DEFAULT_DEADLINE_SECONDS  # unary calls sent without one (0: none)
    encryption_keys: str | None = None  # the key file (storage/encryption.py); None: $SIDECAR_ENCRYPTION_KEYS or none
    # fair turns across clients (api/fairness.py, docs/security.md "Fairness")
    fair_calls: int = fairness.DEFAULT_CAPACITY  # unary handlers running at once, all clients (0: no fair turns)
    fair_calls_per_client: int = fairness.DEFAULT_PER_CLIENT  # ... of one client
    max_calls_per_client: int = fairness.DEFAULT_MAX_CALLS_PER_CLIENT  # over its connections: TOO_MANY_CALLS (0: off)
    # namespace quotas' defaults (storage/usage.py; 0: unlimited): for namespaces without their own (SetQuota)
    quota_max_bytes: int = 0
    quota_max_threads: int = 0
    quota_max_items: int = 0

    def backups(self) -> str:
        return os.path.abspath(self.backup_dir) if self.backup_dir else backup.default_dir(self.data_dir)

    def addresses(self) -> list[str]:
        return self.listen or [f"unix:{os.path.join(os.path.abspath(self.data_dir), SOCKET_NAME)}", DEFAULT_TCP]


class DataDirLocked(RuntimeError):
    pass


class ConfigError(ValueError):
    """Flags that do not go together, or that would expose the store (the message says why)."""


def is_loopback(addr: str) -> bool:
    """Whether the TCP listen address ``addr`` (HOST:PORT) only accepts connections from this host."""
    host = addr.rsplit(":", 1)[0].strip("[]") if ":" in addr else addr
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name (or "" / "0.0.0.0" / "::": every interface)


def check_transport(config: Config) -> None:
    """Refuse configurations that would serve the store unprotected beyond this host."""
    if bool(config.tls_cert) != bool(config.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together")
    if config.tls_client_ca and not config.tls_cert:
        raise ConfigError("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key")
    exposed = [a for a in config.addresses() if not a.startswith("unix:") and not is_loopback(a)]
    if exposed and not config.insecure:
        missing = [what for what, ok in (("TLS (--tls-cert, --tls-key)", config.tls_cert),
                                         ("credentials (--auth-file or --tls-client-ca)",
                                          config.auth_file or config.tls_client_ca)) if not ok]
        if missing:
            raise ConfigError(f"refusing to listen on {', '.join(exposed)} (not loopback) without "
                              f"{' and '.join(missing)}; pass --insecure to do it anyway")


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None


class Sidecar:
    """A running sidecar: store, garbage collector and gRPC server."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.store: Store | None = None
        self.server: grpc.aio.Server | None = None
        self.collector: gc.GarbageCollector | None = None
        self.ctx: context.Ctx | None = None
        self.watchdog: Watchdog | None = None
        self.memory: memory.Memory | None = None
        self._memory_sweeper: asyncio.Task | None = None
        self.sweeper: Sweeper | None = None
        self.health = health.aio.HealthServicer()
        self.metrics = Metrics()
        self.web = None  # the web inspector (web.py), when asked for
        self._lock_fd: int | None = None
        self._backups: asyncio.Task | None = None
        self.bound: list[str] = []
        self.authorizer: auth.Authorizer | None = None
        self.guard: callguard.CallGuard | None = None

    def _wrap(self, service_name: str, method, behavior):
        """Every handler: the call limits and default deadline inside, the metrics and request log outside."""
        return self.metrics.wrap(service_name, method, self.guard.wrap(service_name, method, behavior))

    def reload_auth(self) -> bool:
        """SIGHUP: read the auth file again (connections and calls in flight stay). False if it failed,
        the old file then stays in force."""
        if self.authorizer is None or self.authorizer.path is None:
            log.info("SIGHUP: no auth file to reload")
            return False
        _check_auth_file_mode(self.authorizer.path)
        try:
            policy = self.authorizer.reload()
        except auth.AuthFileError as e:
            log.error("SIGHUP: auth file not reloaded, the previous one stays in force: %s", e)
            return False
        log.info("auth file reloaded: %d tokens, %d client certificates", len(policy.tokens),
                 len(policy.subjects))
        return True

    def _load_keys(self) -> encryption.KeyRing | None:
        """The key ring of --encryption-keys (or $SIDECAR_ENCRYPTION_KEYS); ConfigError when it is invalid."""
        path = self.config.encryption_keys
        try:
            keys = encryption.load(path)
        except (OSError, encryption.KeyFileError) as e:
            raise ConfigError(f"encryption keys: {e}") from None
        if path and encryption.loose_mode(path):
            log.warning("the key file %s can be read or written by other users (chmod 600 it)", path)
        return keys

    def reload_keys(self) -> bool:
        """SIGHUP: read the key file again (rotation without a restart: a key added for a namespace is used
        by its writes from now on). False if it failed; the previous keys then stay in force."""
        if self.store is None or (not self.config.encryption_keys and self.store.keys is None):
            return False
        try:
            keys = self._load_keys()
            self.store.set_keys(keys)
        except (ConfigError, encryption.KeyFileError) as e:
            log.error("SIGHUP: encryption keys not reloaded, the previous ones stay in force: %s", e)
            return False
        log.info("encryption keys reloaded: %s", _describe_keys(keys) if keys is not None else "none")
        return True

    def reload(self) -> None:
        """SIGHUP: the auth file and the key file read again."""
        self.reload_auth()
        self.reload_keys()

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
        check_transport(self.config)
        credentials = None
        if self.config.tls_cert:
            ca = _read(self.config.tls_client_ca) if self.config.tls_client_ca else None
            credentials = grpc.ssl_server_credentials([(_read(self.config.tls_key), _read(self.config.tls_cert))],
                                                      root_certificates=ca, require_client_auth=ca is not None)
        if self.config.auth_file:
            _check_auth_file_mode(self.config.auth_file)
        if self.config.auth_file or self.config.tls_client_ca:
            try:
                self.authorizer = auth.Authorizer(self.config.auth_file, client_certs=bool(self.config.tls_client_ca))
            except auth.AuthFileError as e:
                raise ConfigError(str(e)) from None
        keys = self._load_keys()
        self._lock_data_dir()
        os.chmod(self.config.data_dir, 0o700)  # the LMDB files and the default socket: this user only
        try:
            self.store = Store(self.config.data_dir, map_size=self.config.map_size, durability=self.config.durability,
                               commit_interval=self.config.commit_interval_seconds, max_queue=self.config.max_queue,
                               loop=asyncio.get_running_loop(), compress=self.config.compress,
                               clock=self.config.clock, keys=keys)
        except encryption.KeyFileError as e:
            raise ConfigError(str(e)) from None
        self.store.quota_defaults = (self.config.quota_max_bytes, self.config.quota_max_threads,
                                     self.config.quota_max_items)
        if keys is not None:
            log.info("encryption at rest: %s", _describe_keys(keys))
        self.collector = gc.GarbageCollector(self.store, delay=self.config.gc_delay_seconds)
        self.server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", self.config.max_message_bytes),
            ("grpc.max_send_message_length", self.config.max_message_bytes),
            ("grpc.so_reuseport", 0),
            *((("grpc.max_concurrent_streams", self.config.max_streams_per_connection),
               # a stream stops counting when HTTP/2 closes it, as the client counts (on, gRPC counts it
               # until the server's call object is freed, and refuses with RST_STREAM REFUSED_STREAM a
               # stream the client opened just after another ended: UNAVAILABLE to a bare stub)
               ("grpc.http.overload_protection", 0))
              if self.config.max_streams_per_connection else ()),
        ])
        if self.config.fair_calls < 0 or self.config.fair_calls and self.config.fair_calls_per_client < 1:
            raise ConfigError("--fair-calls must be 0 (off) or more, and --fair-calls-per-client at least 1")
        fair = (fairness.FairQueue(self.config.fair_calls, self.config.fair_calls_per_client)
                if self.config.fair_calls else None)
        self.guard = callguard.CallGuard(self.config.max_calls_per_connection, self.config.default_deadline_seconds,
                                         fair=fair, authorizer=self.authorizer,
                                         max_calls_per_client=self.config.max_calls_per_client)
        self.ctx = context.Ctx(self.store, context.Hub(), self.collector.soon,
                                round(self.config.lease_timeout_seconds * 1000))
        extended = extend_leases_after_restart(self.store)
        dropped = artifacts.drop_stale_uploads(self.store)
        if dropped:
            self.collector.soon()
        if extended or dropped:
            log.info("startup: %d running leases extended, %d unfinished uploads dropped", extended, dropped)
        self.memory = memory.Memory(self.store)
        self.ctx.memory = self.memory
        indexed = self.memory.build_index()
        if indexed:
            log.info("startup: vectors of %d memory items loaded into the index", indexed)
        servicers = {
            "ThreadService": service.ThreadService(self.store, self.collector, self.ctx),
            "AdminService": service.AdminService(self.store, self.collector, self.config.backups()),
            "RunService": service.RunService(self.ctx),
            "EventService": service.EventService(self.ctx),
            "ArtifactService": service.ArtifactService(self.ctx),
            "EffectService": service.EffectService(self.ctx),
            "MemoryService": service.MemoryService(self.memory, self.collector.soon),
            "ConversationService": service.ConversationService(self.ctx),
            "RetentionService": service.RetentionService(self.ctx),
            "SchemaService": service.SchemaService(self.ctx),
            "TransferService": service.TransferService(self.ctx),
        }
        for module, name in SERVICES:
            service.add_to_server(servicers[name], module.DESCRIPTOR.services_by_name[name], self.server,
                                  self.authorizer, wrap=self._wrap)
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
                _socket_dir(path)
            old_umask = os.umask(0o177) if addr.startswith("unix:") else None
            try:
                if credentials is not None and not addr.startswith("unix:"):
                    port = self.server.add_secure_port(addr, credentials)
                else:
                    port = self.server.add_insecure_port(addr)
            finally:
                if old_umask is not None:
                    os.umask(old_umask)
            if not addr.startswith("unix:") and port == 0:
                raise OSError(f"cannot listen on {addr}")
            self.bound.append(addr if addr.startswith("unix:") or not addr.endswith(":0")
                              else f"{addr.rsplit(':', 1)[0]}:{port}")
        self.watchdog = Watchdog(self.ctx, self.config.watchdog_interval_seconds)
        self.metrics.watch(self.store, self.collector, self.ctx, self.watchdog)
        if self.config.metrics_listen:
            log.info("metrics at http://%s/metrics", self.metrics.serve(self.config.metrics_listen, self.authorizer))
        if self.config.http_listen:
            from .web import WebInspector  # starlette, uvicorn and jinja2 load only when asked for
            self.web = WebInspector(self.store, self.ctx, self.authorizer, memory=self.memory)
            log.info("web inspector at http://%s/", await self.web.start(self.config.http_listen))
        await self.server.start()
        self.watchdog.start()
        if self.config.backup_interval_seconds > 0:
            self._backups = asyncio.get_running_loop().create_task(self._backup_loop())
        if self.config.memory_sweep_interval_seconds > 0:
            self._memory_sweeper = asyncio.get_running_loop().create_task(self._sweep_memory())
        self.sweeper = Sweeper(self.ctx, self.config.sweep_interval_seconds,
                               retention_interval=self.config.retention_interval_seconds)
        servicers["RetentionService"].sweeper = self.sweeper
        self.sweeper.start()
        self.metrics.watch_sweeper(self.sweeper)
        for path in sockets:
            os.chmod(path, 0o600)
        for name in (*SERVICE_NAMES, ""):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("sidecar serving %s (data %s, durability %s, native hot path: %s, %s%s)", ", ".join(self.bound),
                 os.path.abspath(self.config.data_dir), self.config.durability, hotpath.NATIVE,
                 self._access_summary(),
                 f", replayed {self.store.replayed} log records" if self.store.replayed else "")

    async def _backup_loop(self) -> None:
        """Scheduled backups: one every backup_interval_seconds, the newest backup_keep time-named ones kept."""
        loop = asyncio.get_running_loop()
        target_dir = self.config.backups()
        while True:
            await asyncio.sleep(self.config.backup_interval_seconds)
            path = os.path.join(target_dir, backup.timed_name())
            try:
                m = await loop.run_in_executor(None, lambda: backup.backup_store(self.store, path,
                                                                                 version=__version__))
                pruned = await loop.run_in_executor(None, backup.prune_timed, target_dir, self.config.backup_keep)
                log.info("scheduled backup %s: %d bytes, %d checkpoints, blake3 %s; %d old backups deleted",
                         path, m.bytes, m.checkpoints, m.blake3[:16], len(pruned))
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a failed backup is logged and retried at the next interval
                log.error("scheduled backup to %s failed: %s", path, e)

    def _access_summary(self) -> str:
        tls = ("mutual TLS" if self.config.tls_client_ca else "TLS") if self.config.tls_cert else "no TLS"
        if self.authorizer is None:
            return f"{tls}, no credential checks"
        p = self.authorizer.policy
        return f"{tls}, credentials required ({len(p.tokens)} tokens, {len(p.subjects)} client certificates)"

    async def _sweep_memory(self) -> None:
        """Sweep expired memory items every ``memory_sweep_interval_seconds`` (small jobs; see api/memory.sweep)."""
        while True:
            await asyncio.sleep(self.config.memory_sweep_interval_seconds)
            try:
                n = await memory.sweep(self.memory, None, self.collector.soon)
                if n:
                    log.info("memory sweeper: %d expired items deleted", n)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the next round tries again
                log.exception("memory sweeper failed")

    async def stop(self) -> None:
        if self._memory_sweeper is not None:
            self._memory_sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._memory_sweeper
            self._memory_sweeper = None
        if self._backups is not None:
            self._backups.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._backups
            self._backups = None
        if self.ctx is not None:
            self.ctx.hub.close()  # open watches and claim waits end now (UNAVAILABLE): clients resume later
        if self.server is not None:
            await self.health.enter_graceful_shutdown()
            await self.server.stop(self.config.grace_seconds)
        self.metrics.close()
        if self.web is not None:
            await self.web.stop()
            self.web = None
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
    loop.add_signal_handler(signal.SIGHUP, sidecar.reload)
    print(f"sidecar ready: {' '.join(sidecar.bound)}", flush=True)
    await stop.wait()
    await sidecar.stop()


def _socket_dir(path: str) -> None:
    """A unix socket's directory: created 0700 when missing; a warning when others can enter it."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700, exist_ok=True)
        return
    mode = os.stat(directory).st_mode & 0o777
    if mode & 0o077:
        log.warning("the socket %s is in %s (mode %o): other users can reach its directory; the socket "
                    "itself is 0600, a 0700 directory is safer", path, directory, mode)


def _describe_keys(keys: encryption.KeyRing) -> str:
    """Namespaces and key names (never key material), for the log."""
    return "; ".join(f"namespace {ns!r}: keys {[k.name for k in ks]}, current {ks[-1].name!r}"
                     for ns, ks in sorted(keys.keys.items())) or "no keys"


def _check_auth_file_mode(path: str) -> None:
    """Whoever can write the auth file can let themselves in: warn when others may."""
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError:
        return  # (loading it reports the error)
    if mode & 0o022:
        log.warning("the auth file %s (mode %o) is writable by other users, who could add tokens of their own",
                    path, mode)
