"""maintenance: the ``sidecar backup``, ``restore``, ``verify`` and ``reencrypt`` commands (progress on stderr, a summary
at the end, exit codes: 0 done and clean, 1 damage found, 2 could not be done)."""
from __future__ import annotations

import json
import os
import sys
import time

from . import __version__
from .errors import ApiError
from .server import SOCKET_NAME
from .storage import backup, encryption, verify


class Progress:
    """Progress lines on stderr: rewritten in place on a terminal, at most one a second otherwise."""

    def __init__(self, stream=None, quiet: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.quiet = quiet
        self._last = 0.0
        self._phase = ""

    def __call__(self, phase: str, done: int, total: int) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        finished = total and done >= total
        if phase == self._phase and not finished and now - self._last < (0.1 if self.tty else 1.0):
            return
        self._phase, self._last = phase, now
        pct = f" {100 * done / total:5.1f}%" if total else ""
        line = f"{phase}: {_amount(phase, done)} of {_amount(phase, total)}{pct}"
        if self.tty:
            self.stream.write("\r\x1b[K" + line + ("\n" if finished else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _amount(phase: str, n: int) -> str:
    if phase in ("copying", "hashing", "restoring", "reading", "sending"):
        return _bytes(n)
    return f"{n:,}"


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _say(text: str) -> None:
    print(text, flush=True)


def cmd_backup(data_dir: str, to: str | None, address: str | None, name: str | None, quiet: bool, *,
               token: str | None = None) -> int:
    """Back up through the serving sidecar (its socket or ``address``), or offline when none serves."""
    progress = Progress(quiet=quiet)
    try:
        if address or backup.is_locked(data_dir):
            if to:
                print("sidecar backup: a serving sidecar writes its backups in its --backup-dir; give --name, not "
                      "--to (or stop it for an offline backup to any path)", file=sys.stderr)
                return 2
            from agentstate import Client  # noqa: PLC0415 - only this path needs the client
            target = address or f"unix:{os.path.join(os.path.abspath(data_dir), SOCKET_NAME)}"
            if not quiet:
                print(f"backing up through the sidecar at {target} ...", file=sys.stderr, flush=True)
            with Client(target, **({"token": token} if token else {})) as c:
                r = c.backup_store(name)
            _say(f"backup done: {r.path}\n  {r.bytes:,} bytes, {r.checkpoints:,} checkpoints, {r.threads:,} threads, "
                 f"{r.blobs:,} nodes\n  blake3 {r.blake3}")
            return 0
        if not to:
            to = os.path.join(backup.default_dir(data_dir), name or backup.timed_name())
        started = time.monotonic()
        m = backup.backup_path(data_dir, to, progress, version=__version__)
    except (backup.BackupError, OSError, ValueError) as e:
        print(f"sidecar backup: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # the client's errors (UNAVAILABLE, INVALID_ARGUMENT ...)
        print(f"sidecar backup: {e}", file=sys.stderr)
        return 2
    _say(f"backup done: {os.path.abspath(to)} in {time.monotonic() - started:.1f} s\n  {m.bytes:,} bytes, "
         f"{m.checkpoints:,} checkpoints, {m.threads:,} threads, {m.nodes:,} nodes\n  blake3 {m.blake3}")
    return 0


def cmd_restore(source: str, data_dir: str, replace: bool, quiet: bool) -> int:
    progress = Progress(quiet=quiet)
    started = time.monotonic()
    try:
        m, report, aside = backup.restore(source, data_dir, replace=replace, progress=progress)
    except (backup.BackupError, OSError, ValueError) as e:
        print(f"sidecar restore: {e}", file=sys.stderr)
        return 2
    _say(f"restore done: {os.path.abspath(data_dir)} from {source} (taken {m.created}) in "
         f"{time.monotonic() - started:.1f} s\n  verified: {report.records:,} records, {report.nodes:,} nodes, "
         f"{report.checkpoints:,} checkpoints, clean"
         + (f"\n  the replaced store was moved to {aside}" if aside else ""))
    return 0


def cmd_verify(data_dir: str | None, backup_path: str | None, as_json: bool, quiet: bool,
               keys_path: str | None = None) -> int:
    progress = Progress(quiet=quiet or as_json)
    try:
        keys = encryption.load(keys_path)
        if backup_path:
            manifest, report = backup.check_backup(backup_path, progress, keys)
            what = f"backup {backup_path} (taken {manifest.created}, blake3 matches)"
        else:
            if not os.path.exists(os.path.join(data_dir, backup.DATA)):
                raise ValueError(f"{data_dir}: no store here (no {backup.DATA})")
            report = verify.verify_path(data_dir, progress, keys)
            what = f"store {data_dir}"
    except (backup.BackupError, OSError, ValueError) as e:
        print(f"sidecar verify: {e}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0 if report.clean else 1
    _say(f"verified {what} in {report.seconds:.1f} s: {report.records:,} records, {report.nodes:,} nodes, "
         f"{report.checkpoints:,} checkpoints of {report.threads:,} threads")
    for ns in sorted(set(report.sealed) | set(report.key_missing)):
        _say(f"  namespace {ns!r}: {report.sealed.get(ns, 0):,} sealed records authenticated"
             + (f", {report.key_missing[ns]:,} not checked: key missing (not given, or removed: unreadable)"
                if report.key_missing.get(ns) else ""))
    if report.clean:
        _say("  clean: every node matches its hash, every reference resolves, every record decodes")
        return 0
    _say(f"  DAMAGE: {len(report.damaged)} damaged records, {len(report.missing_nodes)} missing nodes, "
         f"{len(report.reached)} checkpoints or pending writes reach them")
    for d in report.damaged[:50]:
        _say(f"  damaged {d.table} record {d.key[:40]}: {d.problem}")
    for m in report.missing_nodes[:20]:
        _say(f"  missing node {m}")
    for r in report.reached[:100]:
        _say(f"  {r.what} {r.checkpoint_id!r} of thread {r.thread_id!r} (namespace {r.namespace!r}, checkpoint_ns "
             f"{r.checkpoint_ns!r}) reaches damaged or missing nodes {', '.join(n[:16] for n in r.nodes)}")
    return 1


# ----------------------------------------------------------------- export and import (docs/export-format.md)

def _open_for_export(data_dir: str, keys=None):
    """The store to export from, opened read-only (beside a serving sidecar; an idle store is opened once
    first, so that its write-ahead log replays). ``keys``: to read encrypted namespaces' values with."""
    from .storage.readonly import ReadOnlyStore  # noqa: PLC0415
    from .storage.store import Store  # noqa: PLC0415
    if not os.path.exists(os.path.join(data_dir, backup.DATA)):
        raise ValueError(f"{data_dir}: no store here (no {backup.DATA})")
    if not backup.is_locked(data_dir):
        Store(data_dir).close()
    return ReadOnlyStore(data_dir, keys)


_PLAINTEXT_NOTE = ("  the namespace is encrypted: this file holds its values in PLAINTEXT; keep it as safe as the keys "
                   "(or export with --refuse-encrypted to refuse)")


def _client(address: str, token: str | None, tls_ca: str | None, namespace: str = "default"):
    from agentstate import Client, TLS  # noqa: PLC0415 - only the online commands need the client
    tls = None
    if tls_ca:
        with open(tls_ca, "rb") as f:
            tls = TLS(root_certificates=f.read())
    return Client(address, namespace=namespace, token=token or None, tls=tls)


def cmd_export(data_dir: str, ns: str, thread: str | None, to: str, quiet: bool, *, address: str | None = None,
               token: str | None = None, tls_ca: str | None = None, keys_path: str | None = None,
               refuse_encrypted: bool = False) -> int:
    from .errors import ApiError  # noqa: PLC0415
    from .ops import transfer  # noqa: PLC0415
    from .storage import exportfile  # noqa: PLC0415
    progress = Progress(quiet=quiet)
    what = f"thread {thread!r} of namespace {ns!r}" if thread else f"namespace {ns!r}"
    if address:
        return _export_online(address, ns, thread, to, progress, what, token, tls_ca, refuse_encrypted)
    try:
        keys = encryption.load(keys_path)
        store = _open_for_export(data_dir, keys)
        try:
            s = transfer.export(store, to, ns, thread, progress, source=os.path.abspath(data_dir),
                                refuse_encrypted=refuse_encrypted)
        finally:
            store.close()
    except ApiError as e:
        hint = ""
        if e.reason == "ENCRYPTION_KEY_MISSING":
            hint = (f"; give its keys with --encryption-keys (or ${encryption.ENV_VAR}), or export through the "
                    f"serving sidecar, which holds them (--address)")
        print(f"sidecar export: {e.reason}: {e}{hint}; nothing was exported", file=sys.stderr)
        return 2
    except (exportfile.ExportFileError, OSError, ValueError, RuntimeError) as e:
        print(f"sidecar export: {e}", file=sys.stderr)
        return 2
    _say(f"export done: {what} to {s.path} in {s.seconds:.1f} s\n  {s.threads:,} threads, {s.checkpoints:,} "
         f"checkpoints, {s.records:,} records ({s.blobs:,} distinct values), {_bytes(s.bytes)}\n"
         f"  blake3 {s.blake3}" + (f"\n{_PLAINTEXT_NOTE}" if s.encrypted else ""))
    return 0


def _export_online(address, ns, thread, to, progress, what, token, tls_ca, refuse_encrypted) -> int:
    started = time.monotonic()
    try:
        with _client(address, token, tls_ca, ns) as c:
            if not progress.quiet:
                print(f"exporting {what} from the sidecar at {address} ...", file=sys.stderr, flush=True)
            s = c.transfer.export_to(to, thread_id=thread or "", refuse_encrypted=refuse_encrypted,
                                     progress=progress)
    except Exception as e:  # noqa: BLE001 - the client's errors (typed by status), OSError, a cut stream
        print(f"sidecar export: {e}; nothing was exported", file=sys.stderr)  # (a typed error names its reason)
        return 2
    _say(f"export done: {what} from the sidecar at {address} to {os.path.abspath(to)} in "
         f"{time.monotonic() - started:.1f} s\n  {s.threads:,} threads, {s.checkpoints:,} checkpoints, "
         f"{s.records:,} records ({s.blobs:,} distinct values), {_bytes(s.bytes)}\n  blake3 {s.blake3}"
         + (f"\n{_PLAINTEXT_NOTE}" if s.encrypted else ""))
    return 0


def _import_online(source, address, ns, replace, check_only, progress, token, tls_ca, allow_plaintext) -> int:
    started = time.monotonic()
    try:
        with _client(address, token, tls_ca) as c:
            r = c.transfer.import_from(source, namespace=ns, replace=replace, check_only=check_only,
                                       allow_plaintext=allow_plaintext, progress=progress)
    except Exception as e:  # noqa: BLE001 - the client's errors (typed by status), OSError
        print(f"sidecar import: {e}; nothing was imported", file=sys.stderr)  # (a typed error names its reason)
        if getattr(e, "reason", None) == "QUOTA_EXCEEDED":
            print(quota_refusal(e), file=sys.stderr)
        return 2
    if check_only:
        _say(f"export file {source} is intact and imports into namespace {r.namespace!r} of the sidecar at "
             f"{address} without conflicts: {r.threads:,} threads, {r.checkpoints:,} checkpoints, "
             f"{r.memory_items:,} memory items, {r.records:,} records\n  blake3 {r.blake3}")
        return 0
    _say(f"import done: {source} into the sidecar at {address} (namespace {r.namespace!r}) in "
         f"{time.monotonic() - started:.1f} s\n  {r.threads:,} threads ({r.replaced:,} replaced), "
         f"{r.checkpoints:,} checkpoints, {r.memory_items:,} memory items, {r.memory_revisions:,} memory "
         f"revisions, {r.records:,} records, {_bytes(r.bytes)}"
         + (f"\n  {r.settings_kept:,} namespace settings kept as the target had them" if r.settings_kept else "")
         + _sealed_note(r.sealed, r.source_encrypted))
    return 0


def _sealed_note(sealed: bool, source_encrypted: bool) -> str:
    if sealed:
        return "\n  values sealed under the target namespace's key"
    if source_encrypted:
        return "\n  the file came from an encrypted namespace; its values are stored UNENCRYPTED here"
    return ""


def quota_refusal(e) -> str:
    """The summary line of an import refused by a namespace quota (QUOTA_EXCEEDED): which quota, and the
    numbers."""
    m = e.metadata
    return (f"import refused: namespace {m.get('namespace')!r} is over its quota {m.get('quota')} with this file "
            f"(holds {m.get('usage')}, the import adds {m.get('requested')}, limit {m.get('limit')}); "
            + (f"{m['threads_imported']} threads were imported before, each whole" if m.get("threads_imported")
               else "nothing was imported")
            + " (raise the quota with RetentionService.SetQuota, or free room, and import again)")


def cmd_import(source: str, data_dir: str | None, ns: str | None, replace: bool, check_only: bool,
               quiet: bool, *, address: str | None = None, token: str | None = None, tls_ca: str | None = None,
               keys_path: str | None = None, allow_plaintext: bool = False,
               quota_defaults: tuple[int, int, int] = (0, 0, 0)) -> int:
    import fcntl  # noqa: PLC0415
    from .errors import ApiError  # noqa: PLC0415
    from .ops import transfer  # noqa: PLC0415
    from .storage import exportfile  # noqa: PLC0415
    from .storage.store import Store  # noqa: PLC0415
    progress = Progress(quiet=quiet)
    if address:
        return _import_online(source, address, ns, replace, check_only, progress, token, tls_ca, allow_plaintext)
    started = time.monotonic()
    try:
        p = transfer.verify_file(source, ns, progress)  # before the target is touched at all
        if check_only:
            scope = p.header.get("scope") or {}
            _say(f"export file {source} is intact (format {p.header['format']} version {p.header['version']}, "
                 f"created {p.header.get('created')})\n  scope: namespace {scope.get('namespace')!r}"
                 + (f", thread {scope['thread']!r}" if scope.get("thread") else "")
                 + f"; {len(p.threads):,} threads, {p.records:,} records, {len(p.blobs):,} distinct values"
                 f"\n  blake3 {p.blake3}"
                 + ("\n  exported from an encrypted namespace: its values are in plaintext in the file"
                    if transfer.source_encrypted(p) else ""))
            p.close()
            return 0
        keys = encryption.load(keys_path)
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(data_dir, backup.LOCK), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ValueError(f"{data_dir} is in use by a sidecar: stop it to import offline, or import "
                                 f"through it (--address)") from None
            # "process": the import's jobs are not synced one by one (a crash loses at most a tail of whole
            # jobs, redone when the import is run again); its last job is, and closing the store commits
            store = Store(data_dir, keys=keys, durability="process")
            store.quota_defaults = quota_defaults  # (a namespace's own quotas are in the store)
            try:
                s = transfer.import_file(store, p, replace=replace, progress=progress,
                                         allow_plaintext=allow_plaintext)
            finally:
                store.close()
                p.close()
        finally:
            os.close(fd)
    except exportfile.ExportFileError as e:
        print(f"sidecar import: {source}: {e}; nothing was imported", file=sys.stderr)
        return 2
    except ApiError as e:
        done = e.metadata.get("threads_imported")  # stopped midway: whole threads are in (re-run to finish)
        print(f"sidecar import: {e.reason}: {e}" + ("" if done else "; nothing was imported"), file=sys.stderr)
        if e.reason == "QUOTA_EXCEEDED":
            print(quota_refusal(e), file=sys.stderr)
        return 2
    except (OSError, ValueError, RuntimeError) as e:
        print(f"sidecar import: {e}", file=sys.stderr)
        return 2
    _say(f"import done: {source} into {os.path.abspath(data_dir)} (namespace {s.namespace!r}) in "
         f"{time.monotonic() - started:.1f} s\n  {s.threads:,} threads ({s.replaced:,} replaced), "
         f"{s.checkpoints:,} checkpoints, {s.memory_items:,} memory items, {s.memory_revisions:,} memory revisions, "
         f"{s.records:,} records" + (f"\n  {s.settings_kept:,} namespace settings kept as the target had them"
                                     if s.settings_kept else "")
         + (f"\n  resumed an interrupted import of this file: {s.resumed:,} threads were in already"
            if s.resumed else "")
         + f"\n  longest write transaction {s.longest_job * 1000:.1f} ms"
         + _sealed_note(s.sealed, s.source_encrypted))
    return 0


def cmd_reencrypt(data_dir: str, namespace: str, keys_path: str | None, batch: int, start_after: str,
                  quiet: bool) -> int:
    """``sidecar reencrypt``: the namespace's records sealed with older keys rewritten under its current key
    (storage/rekey.py), offline: a sidecar serving the directory is refused."""
    from .storage import rekey  # noqa: PLC0415
    from .storage.store import Store  # noqa: PLC0415
    progress = Progress(quiet=quiet)
    try:
        if not os.path.exists(os.path.join(data_dir, backup.DATA)):
            raise ValueError(f"{data_dir}: no store here (no {backup.DATA})")
        if backup.is_locked(data_dir):
            raise ValueError(f"{data_dir} is in use by a serving sidecar: stop it first (its old keys stay "
                             "readable meanwhile, new writes already use the current key)")
        keys = encryption.load(keys_path)
        if keys is None:
            raise ValueError(f"no keys: give --encryption-keys or set ${encryption.ENV_VAR}")
        store = Store(data_dir, keys=keys)
        try:
            summary = rekey.reencrypt(store, namespace, batch=batch, start_after=bytes.fromhex(start_after),
                                      progress=progress)
        finally:
            store.close()
    except (OSError, ValueError) as e:
        print(f"sidecar reencrypt: {e}", file=sys.stderr)
        return 2
    except ApiError as e:
        print(f"sidecar reencrypt: {e.message}", file=sys.stderr)
        return 2
    _say(f"re-encrypted namespace {namespace!r} under key {summary.key!r}: {summary.records:,} records looked at, "
         f"{summary.rewritten:,} rewritten"
         + (" (" + ", ".join(f"{n:,} from {k!r}" for k, n in sorted(summary.by_key.items())) + ")"
            if summary.by_key else "")
         + f", {summary.current:,} already under it, {summary.plain:,} structure nodes (not sealed)")
    if summary.key_missing or summary.damaged:
        _say(f"  NOT rewritten: {summary.key_missing:,} sealed with a key that is not loaded, {summary.damaged:,} "
             "that do not authenticate (see sidecar verify)")
        return 1
    if summary.last_id:
        _say(f"  last node id {summary.last_id} (a stopped run resumes by itself; --start-after skips ahead)")
    return 0
