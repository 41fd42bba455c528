"""cli: the ``sidecar`` console command."""
from __future__ import annotations

import argparse
import asyncio
import os
import sys

from . import __version__, inspector, logs
from .metrics import parse_listen
from .storage.store import COMMIT_INTERVAL, MAX_QUEUE
from .server import DEFAULT_DATA_DIR, DEFAULT_TCP, SOCKET_NAME, Config, DataDirLocked, serve


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
    s.add_argument("--durability", default="sync", choices=["sync", "process"],
                   help="when a write is acknowledged: sync = after fsync (survives power loss); process = once in "
                        "the write-ahead log (survives a crash of the sidecar, not of the OS); default: %(default)s")
    s.add_argument("--commit-interval", type=_positive, default=COMMIT_INTERVAL, metavar="SECONDS",
                   help="process mode: synced LMDB commits at least this often (default: %(default)s)")
    s.add_argument("--max-queue", type=int, default=MAX_QUEUE, metavar="N",
                   help="writes in flight before new ones get OVERLOADED with a retry hint (default: %(default)s)")
    s.add_argument("--no-compress", dest="compress", action="store_false",
                   help="store value nodes as they are, not zstd-compressed (reading compressed ones still works)")
    s.add_argument("--metrics-listen", type=_listen, default=None, metavar="HOST:PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics (off by default; see "
                        "docs/operations.md)")
    s.add_argument("--http", type=_http, default=None, metavar="HOST:PORT",
                   help="serve the web inspector (read-only, no authentication) at http://HOST:PORT/; PORT alone "
                        "binds 127.0.0.1 (off by default)")
    s.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="DEBUG also logs every successful call (failed ones are logged at INFO)")
    s.add_argument("--log-format", default="text", choices=list(logs.FORMATS),
                   help="text lines, or one JSON object per line with the request's namespace, thread_id, "
                        "run_id and request_id as keys (default: %(default)s)")
    default_socket = os.path.join(DEFAULT_DATA_DIR, SOCKET_NAME)
    default_address = f"unix:{default_socket}" if os.path.exists(default_socket) else DEFAULT_TCP
    inspector.add_parser(sub, default_address)
    args = parser.parse_args(argv)
    if args.command == "inspect":
        return inspector.run(args, default_address)
    logs.configure(args.log_level, args.log_format)
    config = Config(data_dir=args.data_dir, listen=args.listen, map_size=args.map_size, grace_seconds=args.grace,
                    lease_timeout_seconds=args.lease_timeout, watchdog_interval_seconds=args.watchdog_interval,
                    durability=args.durability, commit_interval_seconds=args.commit_interval, max_queue=args.max_queue,
                    compress=args.compress, metrics_listen=args.metrics_listen, http_listen=args.http)
    try:
        asyncio.run(serve(config))
    except DataDirLocked as e:
        print(f"sidecar: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"sidecar: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
