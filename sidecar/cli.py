"""cli: the ``sidecar`` console command."""
from __future__ import annotations

import argparse
import asyncio
import os
import sys

from . import __version__, inspector, limits, logs
from .metrics import parse_listen
from .storage.store import COMMIT_INTERVAL, MAX_QUEUE
from .api import auth, callguard, fairness
from .server import DEFAULT_DATA_DIR, DEFAULT_TCP, SOCKET_NAME, Config, ConfigError, DataDirLocked, serve


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    text = text.strip().lower().rstrip("ib").rstrip("b")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def _listen(text: str) -> str:
    try:
        parse_listen(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _http(text: str) -> str:
    try:
        parse_listen(text if not text.isdigit() else f"127.0.0.1:{text}")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sidecar", description="Agent State Sidecar: agent state over gRPC on LMDB.")
    parser.add_argument("--version", action="version", version=f"sidecar {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the sidecar",
                       description=f"Run the sidecar. Without flags: data in ./{DEFAULT_DATA_DIR}, listening on "
                                   f"unix:./{DEFAULT_DATA_DIR}/{SOCKET_NAME} and {DEFAULT_TCP}.")
    s.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="LMDB data directory (default: %(default)s)")
    s.add_argument("--listen", action="append", default=[], metavar="ADDR",
                   help="unix:PATH or HOST:PORT; repeatable (default: the data dir's socket and " + DEFAULT_TCP + ")")
    s.add_argument("--map-size", type=_size, default=None, metavar="BYTES",
                   help="initial LMDB map size, e.g. 1G (it grows by itself)")
    s.add_argument("--grace", type=float, default=10.0, metavar="SECONDS",
                   help="how long shutdown waits for in-flight calls (default: %(default)s)")
    s.add_argument("--lease-timeout", type=_positive, default=30.0, metavar="SECONDS",
                   help="lease timeout of runs that set none (default: %(default)s)")
    s.add_argument("--watchdog-interval", type=_positive, default=1.0, metavar="SECONDS",
                   help="how often expired leases and run timeouts are looked for (default: %(default)s)")
    s.add_argument("--sweep-interval", type=_positive, default=1.0, metavar="SECONDS",
                   help="how often conversations' idle timers are looked at (default: %(default)s)")
    s.add_argument("--durability", default="sync", choices=["sync", "process"],
                   help="when a write is acknowledged: sync = after fsync (survives power loss); process = once in "
                        "the write-ahead log (survives a crash of the sidecar, not of the OS); default: %(default)s")
    s.add_argument("--commit-interval", type=_positive, default=COMMIT_INTERVAL, metavar="SECONDS",
                   help="process mode: synced LMDB commits at least this often (default: %(default)s)")
    s.add_argument("--max-queue", type=int, default=MAX_QUEUE, metavar="N",
                   help="writes in flight before new ones get OVERLOADED with a retry hint (default: %(default)s)")
    s.add_argument("--no-compress", dest="compress", action="store_false",
                   help="store value nodes as they are, not zstd-compressed (reading compressed ones still works)")
    s.add_argument("--backup-dir", default=None, metavar="DIR",
                   help="where BackupStore and scheduled backups go (default: the data dir's path + '-backups')")
    s.add_argument("--backup-interval", type=_positive, default=None, metavar="SECONDS",
                   help="take a backup this often while serving (default: never)")
    s.add_argument("--backup-keep", type=int, default=7, metavar="N",
                   help="scheduled backups kept; older time-named ones are deleted (default: %(default)s)")
    s.add_argument("--auth-file", metavar="PATH",
                   help="require a credential on every call: the TOML file of token hashes (and client "
                        "certificate subjects) with their namespaces and roles; reloaded on SIGHUP "
                        "(see `sidecar token` and docs/security.md)")
    s.add_argument("--tls-cert", metavar="PEM", help="serve the TCP listeners over TLS with this certificate chain")
    s.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    s.add_argument("--tls-client-ca", metavar="PEM",
                   help="mutual TLS: require client certificates signed by this CA (their subjects map to "
                        "namespaces in the auth file's [[client_cert]] entries; without an auth file every "
                        "such certificate may do everything)")
    s.add_argument("--insecure", action="store_true",
                   help="allow a TCP listener on a non-loopback address without TLS and credentials")
    s.add_argument("--memory-sweep-interval", type=float, default=60.0, metavar="SECONDS",
                   help="how often expired memory items are deleted (0: only on SweepExpiredMemoryItems; expired "
                        "items are invisible at once either way; default: %(default)s)")
    s.add_argument("--retention-interval", type=float, default=60.0, metavar="SECONDS",
                   help="how often the sweeper applies retention policies (0: only on ApplyRetention; "
                        "docs/lifecycle.md; default: %(default)s)")
    s.add_argument("--metrics-listen", type=_listen, default=None, metavar="HOST:PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics (off by default; see "
                        "docs/operations.md)")
    s.add_argument("--http", type=_http, default=None, metavar="HOST:PORT",
                   help="serve the web inspector (read-only; with --auth-file pages need a token) at http://HOST:PORT/; PORT alone "
                        "binds 127.0.0.1 (off by default)")
    s.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="DEBUG also logs every successful call (failed ones are logged at INFO)")
    s.add_argument("--log-format", default="text", choices=list(logs.FORMATS),
                   help="text lines, or one JSON object per line with the request's namespace, thread_id, "
                        "run_id and request_id as keys (default: %(default)s)")
    s.add_argument("--max-streams-per-connection", type=int, default=callguard.DEFAULT_MAX_STREAMS, metavar="N",
                   help="concurrent calls (HTTP/2 streams, open watches and write streams included) per client "
                        "connection; more wait in the client, so a flooding connection's calls queue ahead of no "
                        "other client's (fairness between clients); 0: gRPC's default, no limit (default: "
                        "%(default)s; see docs/security.md 'Limits')")
    s.add_argument("--max-calls-per-connection", type=int, default=callguard.DEFAULT_MAX_CALLS, metavar="N",
                   help="calls in progress per TCP connection before more are refused RESOURCE_EXHAUSTED "
                        "TOO_MANY_CALLS; 0: no limit (default: %(default)s)")
    s.add_argument("--max-message-bytes", type=_size, default=limits.MAX_MESSAGE_BYTES, metavar="BYTES",
                   help="largest request or response message (default: 64M)")
    s.add_argument("--default-deadline", type=float, default=callguard.DEFAULT_DEADLINE_SECONDS, metavar="SECONDS",
                   help="deadline of a unary call whose client sent none; 0: none (default: %(default)s)")
    s.add_argument("--encryption-keys", metavar="PATH", default=None,
                   help="encrypt the values of the namespaces it lists at rest (AES-256-GCM): the TOML key file "
                        "(see `sidecar encryption-key` and docs/security.md); reloaded on SIGHUP; default: the "
                        "same text in $SIDECAR_ENCRYPTION_KEYS, or no encryption")
    s.add_argument("--fair-calls", type=int, default=fairness.DEFAULT_CAPACITY, metavar="N",
                   help="unary calls whose handlers run at once, all clients together; more wait, and freed turns "
                        "go round-robin across clients; 0: no fair turns (default: %(default)s; see "
                        "docs/security.md 'Fairness')")
    s.add_argument("--fair-calls-per-client", type=int, default=fairness.DEFAULT_PER_CLIENT, metavar="N",
                   help="... of one client (its token, or else its TCP connection) (default: %(default)s)")
    s.add_argument("--max-calls-per-client", type=int, default=fairness.DEFAULT_MAX_CALLS_PER_CLIENT, metavar="N",
                   help="unary calls in progress per client over all its connections (with --auth-file: per "
                        "token) before more are refused RESOURCE_EXHAUSTED TOO_MANY_CALLS; 0: no limit "
                        "(default: %(default)s)")
    s.add_argument("--quota-max-bytes", type=_size, default=0, metavar="BYTES",
                   help="default quota of charged bytes per namespace (checkpoints, pending writes, artifacts, "
                        "conversation and memory items, memory history); "
                        "over it a write is refused RESOURCE_EXHAUSTED QUOTA_EXCEEDED; SetQuota overrides it "
                        "per namespace; 0: none (docs/security.md 'Quotas')")
    s.add_argument("--quota-max-threads", type=int, default=0, metavar="N",
                   help="default quota of threads per namespace; 0: none")
    s.add_argument("--quota-max-items", type=int, default=0, metavar="N",
                   help="default quota of items (conversation items, memory items, artifact versions) per "
                        "namespace; 0: none")
    t = sub.add_parser("token", help="make a bearer token and its auth-file entry",
                       description="Make a random bearer token. Prints the token (give it to the client; it is "
                                   "not stored anywhere) on the first line, then its auth-file entry (holding the "
                                   "token's SHA-256 only), or appends the entry to --append's file.")
    t.add_argument("--role", required=True, choices=list(auth.ROLES),
                   help="read: read calls; write: also writes; admin: also the store-wide AdminService calls")
    t.add_argument("--namespace", action="append", required=True, dest="namespaces", metavar="NS",
                   help="a namespace the token may use; repeatable; '*' for every namespace")
    t.add_argument("--name", default="", help="a label for logs")
    t.add_argument("--append", metavar="AUTH_FILE",
                   help="append the entry to this auth file (created 0600) instead of printing it; "
                        "send the sidecar SIGHUP afterwards")
    b = sub.add_parser("backup", help="an online, consistent, compacted copy of a store",
                       description="Back up the store in --data-dir. While a sidecar serves it, the backup is "
                                   "taken by that sidecar (through its socket, or --address) into its --backup-dir; "
                                   "otherwise the store is opened here and copied to --to.")
    b.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="the store's data directory (default: %(default)s)")
    b.add_argument("--to", default=None, metavar="PATH",
                   help="offline: the new backup directory (default: <data dir>-backups/backup-<UTC time>)")
    b.add_argument("--name", default=None, help="online: the backup's name in the sidecar's backup directory")
    b.add_argument("--address", default=None, help="the serving sidecar's address (default: the data dir's socket)")
    b.add_argument("--token", default=os.environ.get("SIDECAR_TOKEN"), help="online, with --auth-file: an admin "
                   "token (default: $SIDECAR_TOKEN)")
    b.add_argument("--quiet", action="store_true", help="no progress lines")
    r = sub.add_parser("restore", help="restore a backup into a data directory (verified first)",
                       description="Restore a backup made by 'sidecar backup'. The backup is verified first; a data "
                                   "directory a sidecar holds is refused; an existing store is replaced only with "
                                   "--replace, and then moved aside, never deleted.")
    r.add_argument("--from", dest="source", required=True, metavar="PATH", help="the backup directory")
    r.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="where to restore it (default: %(default)s)")
    r.add_argument("--replace", action="store_true", help="replace an existing store (moved to <dir>.replaced-<time>)")
    r.add_argument("--quiet", action="store_true", help="no progress lines")
    v = sub.add_parser("verify", help="check every node against its hash and every reference",
                       description="Verify a store (read-only; a running sidecar keeps serving) or a backup: every "
                                   "node re-hashed against its address, every reference resolved, every record "
                                   "decoded; damage is reported by thread and checkpoint. Exit code 1 on damage.")
    where = v.add_mutually_exclusive_group()
    where.add_argument("--data-dir", default=None, help=f"the store (default: {DEFAULT_DATA_DIR})")
    where.add_argument("--backup", default=None, metavar="PATH", help="a backup directory (its BLAKE3 checked too)")
    v.add_argument("--json", action="store_true", help="the report as JSON")
    v.add_argument("--quiet", action="store_true", help="no progress lines")
    x = sub.add_parser("export", help="write a thread or a namespace into a portable export file",
                       description="Export a namespace (its threads with everything on them, its memory and "
                                   "settings) or one thread into a versioned, portable file (docs/export-format.md). "
                                   "A serving sidecar's data directory is read read-only (it keeps serving).")
    x.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="the store's data directory (default: %(default)s)")
    x.add_argument("--namespace", required=True, help="the namespace to export")
    x.add_argument("--thread", default=None, help="only this thread (no memory)")
    x.add_argument("--to", required=True, metavar="FILE", help="the new export file (never overwritten)")
    x.add_argument("--quiet", action="store_true", help="no progress lines")
    _transfer_options(x, "export")
    x.add_argument("--encryption-keys", metavar="PATH", default=None,
                   help="offline: the key file to read encrypted namespaces' values with (default: "
                        "$SIDECAR_ENCRYPTION_KEYS); their values are written in plaintext (docs/export-format.md)")
    x.add_argument("--refuse-encrypted", action="store_true",
                   help="refuse (EXPORT_PLAINTEXT_REFUSED) to export an encrypted namespace's values in plaintext")
    m = sub.add_parser("import", help="import an export file into a data directory (verified first)",
                       description="Import a file made by 'sidecar export' into a data directory no sidecar serves "
                                   "(created if new). The whole file is verified and every conflict checked before "
                                   "anything is written; each thread is imported whole in one transaction, and an "
                                   "import interrupted midway is finished by running it again. An import "
                                   "that would take the namespace over a quota is refused (QUOTA_EXCEEDED) before "
                                   "anything is written.")
    m.add_argument("--from", dest="source", required=True, metavar="FILE", help="the export file")
    m.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="the target data directory (default: %(default)s)")
    m.add_argument("--namespace", default=None, help="import into this namespace (default: the exported one)")
    m.add_argument("--replace", action="store_true",
                   help="replace threads and memory items that exist in the target (default: refuse)")
    m.add_argument("--check", action="store_true", help="only verify the file; write nothing")
    m.add_argument("--quiet", action="store_true", help="no progress lines")
    _transfer_options(m, "import")
    m.add_argument("--encryption-keys", metavar="PATH", default=None,
                   help="offline: the target store's key file; a namespace it lists gets its values sealed "
                        "(default: $SIDECAR_ENCRYPTION_KEYS)")
    m.add_argument("--allow-plaintext", action="store_true",
                   help="import a file exported from an encrypted namespace into a namespace without a key "
                        "(its values then stored unencrypted; refused otherwise)")
    for name, kind, what in (("bytes", _size, "BYTES"), ("threads", int, "N"), ("items", int, "N")):
        m.add_argument(f"--quota-max-{name}", type=kind, default=0, metavar=what,
                       help=f"offline: the default max_{name} quota the serving sidecar applies (its --quota-max-"
                            f"{name}), for a namespace without its own (SetQuota); 0: none" if name == "bytes" else
                       f"offline: as --quota-max-bytes, for max_{name}")
    v.add_argument("--encryption-keys", metavar="PATH", default=None,
                   help="check sealed records with these keys (default: $SIDECAR_ENCRYPTION_KEYS; without keys "
                        "sealed records are counted as 'key missing')")
    e = sub.add_parser("reencrypt", help="rewrite a namespace's values sealed with older keys under its current key",
                       description="Offline (stop the sidecar first): every record of --namespace sealed with an "
                                   "older key is opened and sealed again with the namespace's current key (the "
                                   "last one the key file lists for it), in small synced transactions with "
                                   "progress and a summary. A stopped run resumes by itself. Afterwards the old "
                                   "keys can be removed from the key file.")
    e.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="the store (default: %(default)s)")
    e.add_argument("--namespace", required=True, help="the encrypted namespace")
    e.add_argument("--encryption-keys", metavar="PATH", default=None,
                   help="the key file (default: $SIDECAR_ENCRYPTION_KEYS)")
    e.add_argument("--batch", type=int, default=500, metavar="N", help="records per transaction (default: %(default)s)")
    e.add_argument("--start-after", default="", metavar="HEX", help="begin after this node id (hex)")
    e.add_argument("--quiet", action="store_true", help="no progress lines")
    k = sub.add_parser("encryption-key", help="make a key-file entry with a new random key",
                       description="Print a [[key]] entry with 32 fresh random bytes for the key file (or append "
                                   "it to --append's file, created 0600). Listed after a namespace's other keys "
                                   "it becomes its current key (send the sidecar SIGHUP).")
    k.add_argument("--namespace", required=True)
    k.add_argument("--id", required=True, help="the key's name (permanent: records name it)")
    k.add_argument("--append", metavar="KEY_FILE", help="append the entry to this key file")
    default_socket = os.path.join(DEFAULT_DATA_DIR, SOCKET_NAME)
    default_address = f"unix:{default_socket}" if os.path.exists(default_socket) else DEFAULT_TCP
    inspector.add_parser(sub, default_address)
    args = parser.parse_args(argv)
    if args.command == "inspect":
        return inspector.run(args, default_address)
    if args.command == "token":
        return _token(args)
    if args.command == "encryption-key":
        return _encryption_key(args)
    if args.command == "reencrypt":
        from . import maintenance  # noqa: PLC0415
        return maintenance.cmd_reencrypt(args.data_dir, args.namespace, args.encryption_keys, args.batch,
                                         args.start_after, args.quiet)
    if args.command in ("backup", "restore", "verify", "export", "import"):
        from . import maintenance  # noqa: PLC0415 - only the maintenance commands need it
        if args.command == "backup":
            return maintenance.cmd_backup(args.data_dir, args.to, args.address, args.name, args.quiet,
                                          token=args.token)
        if args.command == "restore":
            return maintenance.cmd_restore(args.source, args.data_dir, args.replace, args.quiet)
        if args.command == "export":
            return maintenance.cmd_export(args.data_dir, args.namespace, args.thread, args.to, args.quiet,
                                          address=args.address, token=args.token, tls_ca=args.tls_ca,
                                          keys_path=args.encryption_keys, refuse_encrypted=args.refuse_encrypted)
        if args.command == "import":
            return maintenance.cmd_import(args.source, args.data_dir, args.namespace, args.replace, args.check,
                                          args.quiet, address=args.address, token=args.token, tls_ca=args.tls_ca,
                                          keys_path=args.encryption_keys, allow_plaintext=args.allow_plaintext,
                                          quota_defaults=(args.quota_max_bytes, args.quota_max_threads,
                                                          args.quota_max_items))
        return maintenance.cmd_verify(args.data_dir or (None if args.backup else DEFAULT_DATA_DIR), args.backup,
                                      args.json, args.quiet, args.encryption_keys)
    logs.configure(args.log_level, args.log_format)
    config = Config(data_dir=args.data_dir, listen=args.listen, map_size=args.map_size, grace_seconds=args.grace,
                    lease_timeout_seconds=args.lease_timeout, watchdog_interval_seconds=args.watchdog_interval,
                    durability=args.durability, commit_interval_seconds=args.commit_interval, max_queue=args.max_queue,
                    compress=args.compress, backup_dir=args.backup_dir,
                    backup_interval_seconds=args.backup_interval or 0.0, backup_keep=args.backup_keep,
                    auth_file=args.auth_file, tls_cert=args.tls_cert,
                    tls_key=args.tls_key, tls_client_ca=args.tls_client_ca, insecure=args.insecure,
                    metrics_listen=args.metrics_listen, http_listen=args.http,
                    memory_sweep_interval_seconds=args.memory_sweep_interval,
                    sweep_interval_seconds=args.sweep_interval,
                    retention_interval_seconds=args.retention_interval,
                    max_streams_per_connection=args.max_streams_per_connection,
                    max_calls_per_connection=args.max_calls_per_connection,
                    max_message_bytes=args.max_message_bytes, default_deadline_seconds=args.default_deadline,
                    encryption_keys=args.encryption_keys,
                    fair_calls=args.fair_calls, fair_calls_per_client=args.fair_calls_per_client,
                    max_calls_per_client=args.max_calls_per_client,
                    quota_max_bytes=args.quota_max_bytes, quota_max_threads=args.quota_max_threads,
                    quota_max_items=args.quota_max_items)
    try:
        asyncio.run(serve(config))
    except (DataDirLocked, ConfigError) as e:
        print(f"sidecar: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"sidecar: {e}", file=sys.stderr)
        return 2
    return 0


def _transfer_options(p, what: str) -> None:
    """--address, --token, --tls-ca of ``sidecar export`` / ``import`` through a serving sidecar."""
    p.add_argument("--address", default=None, metavar="ADDR",
                   help=f"{what} through a serving sidecar (unix:PATH or HOST:PORT; TransferService) instead of a "
                        "data directory")
    p.add_argument("--token", default=os.environ.get("SIDECAR_TOKEN") or None,
                   help="with --address, for a sidecar run with --auth-file: an admin token that may use the "
                        "namespace (default: $SIDECAR_TOKEN)")
    p.add_argument("--tls-ca", default=None, metavar="PEM",
                   help="with --address: connect over TLS, checking the sidecar's certificate against this CA")


def _token(args) -> int:
    token = auth.new_token()
    entry = auth.entry_toml(token, args.role, args.namespaces, args.name)
    if args.append:
        import os
        fd = os.open(args.append, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            if f.tell():
                f.write("\n")
            f.write(entry)
        print(token)
        print(f"sidecar token: entry appended to {args.append}; send the sidecar SIGHUP to load it",
              file=sys.stderr)
    else:
        print(token)
        print(entry, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def _encryption_key(args) -> int:
    import json  # noqa: PLC0415

    from .storage import encryption  # noqa: PLC0415
    entry = (f"[[key]]\nnamespace = {json.dumps(args.namespace)}\nid = {json.dumps(args.id)}\n"
             f"key = \"{encryption.new_key()}\"\n")
    if args.append:
        fd = os.open(args.append, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            if f.tell():
                f.write("\n")
            f.write(entry)
        print(f"sidecar encryption-key: entry {args.id!r} of namespace {args.namespace!r} appended to "
              f"{args.append}; send the sidecar SIGHUP to use it", file=sys.stderr)
        return 0
    print(entry, end="")
    return 0
