"""cli: the ``sidecar`` console command."""
from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from . import __version__
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
    s.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = Config(data_dir=args.data_dir, listen=args.listen, map_size=args.map_size, grace_seconds=args.grace,
                    lease_timeout_seconds=args.lease_timeout, watchdog_interval_seconds=args.watchdog_interval,
                    durability=args.durability, commit_interval_seconds=args.commit_interval, max_queue=args.max_queue,
                    compress=args.compress, sweep_interval_seconds=args.sweep_interval)
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
