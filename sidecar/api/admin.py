"""admin: store-wide operations of AdminService that need more than a line (backups, re-encryption)."""
from __future__ import annotations

import asyncio
import os

from agentstate.v1 import admin_pb2

from .. import __version__
from ..errors import ApiError, invalid
from ..storage import backup, rekey
from ..storage.store import Store
from . import validate, wire


async def backup_store(store: Store, backup_dir: str, req: admin_pb2.BackupStoreRequest,
                       ) -> admin_pb2.BackupStoreResponse:
    """BackupStore: an online copy of the store into a new directory of ``backup_dir`` (storage/backup.py)."""
    name = req.name
    why = backup.check_name(name)
    if why is not None:
        raise invalid("name", why)
    path = os.path.join(backup_dir, name)
    if os.path.lexists(path):
        raise invalid("name", f"a backup named {name!r} exists in {backup_dir}; a backup never overwrites")
    loop = asyncio.get_running_loop()
    try:
        m = await loop.run_in_executor(None, lambda: backup.backup_store(store, path, version=__version__))
    except backup.BackupError as e:
        raise invalid("name", str(e)) from None
    except OSError as e:
        raise ApiError("INTERNAL_ERROR", f"cannot write the backup in {backup_dir}: {e.strerror or e}") from None
    out = admin_pb2.BackupStoreResponse(path=path, format=m.format, bytes=m.bytes, blake3=m.blake3,
                                        checkpoints=m.checkpoints, threads=m.threads, blobs=m.nodes,
                                        sidecar_version=m.sidecar_version)
    wire.set_timestamp(out.create_time, m.created_us)
    return out


async def reencrypt_namespace(store: Store, req: admin_pb2.ReencryptNamespaceRequest,
                              ) -> admin_pb2.ReencryptNamespaceResponse:
    """ReencryptNamespace: the namespace's records sealed with older keys rewritten under its current key
    (storage/rekey.py), online, off the event loop (each batch is one write of the owner loop)."""
    ns = validate.namespace(req.namespace)
    batch = req.batch_size or rekey.BATCH
    if batch > 10_000:
        raise invalid("batch_size", f"at most 10000 records per transaction, not {batch}")
    if ns not in store.encrypted:
        raise invalid("namespace", f"namespace {ns!r} is not encrypted (the key file lists no key for it)")
    store.scope(ns)  # ENCRYPTION_KEY_MISSING before any work
    s = await asyncio.get_running_loop().run_in_executor(None, lambda: rekey.reencrypt(store, ns, batch=batch))
    return admin_pb2.ReencryptNamespaceResponse(key_id=s.key, records=s.records, rewritten=s.rewritten,
                                                already_current=s.current, structure_nodes=s.plain,
                                                key_missing=s.key_missing, damaged=s.damaged)
