"""encryption: value records sealed at rest with per-namespace keys (AES-256-GCM), rotation, shredding.

Keys come from a key file (``sidecar serve --encryption-keys PATH``) or, with
no file, from the environment variable ``SIDECAR_ENCRYPTION_KEYS`` holding the
same text. The file is TOML::

    [[key]]
    namespace = "team-a"
    id = "2026-01"                  # the key's name, permanent: records name it
    key = "<base64 of 32 random bytes>"   # `sidecar encryption-key` makes one

    [[key]]                         # a second key of team-a, listed later: new writes use it
    namespace = "team-a"
    id = "2026-07"
    key = "..."

A namespace with at least one key is *encrypted*. The last key listed for it
is its current key: new records are sealed with it; records sealed with an
earlier key stay readable as long as that key is listed (rotation without
rewriting anything; ``sidecar reencrypt`` rewrites old records under the
current key so the old key can then be removed).

What is sealed: every value-bearing node record of an encrypted namespace
(a value ``v``, a compressed value ``z``, a chunk ``c`` of a long string or
an artifact), after compression. A sealed record is

    hash (32) + ``e`` + key id (8) + nonce (12) + AES-GCM(stored node) (+ 16-byte tag)

with associated data ``"agentstate.v1 sealed" + key id + hash``: the tag
binds the ciphertext to its key and to the node it claims to be, so a record
cannot be moved to another key or swapped for another node's ciphertext
without failing authentication. The key id is the first 8 bytes of
BLAKE3(namespace, key name): it says which key to use and never depends on
key material. Nonces are 96 random bits per record (``os.urandom``).

Addresses are scoped (docs/security.md, "Encryption at rest"): an encrypted
namespace's nodes are indexed under ``scope + hash`` (scope = 8 bytes derived
from the namespace name), so deduplication stays inside the namespace, and a
``nodescope`` table says which records belong to which scope (garbage
collection and verify need it). Unencrypted namespaces keep the shared
layout of every existing store.

The store remembers (``meta``) every key id it has used, with its namespace,
name and a check value (BLAKE3 keyed by the key: it proves the key, reveals
nothing of it), so that

* a key listed under a used name with other key material is refused at start
  (its records would not authenticate);
* a namespace whose keys were all removed is still known to be encrypted:
  its reads and writes fail with ``ENCRYPTION_KEY_MISSING`` instead of
  writing plaintext next to unreadable records (crypto-shredding: removing a
  namespace's keys makes its stored values unreadable for good).

Key material is never logged, printed or put in an error: :class:`Key` has
no readable field holding it and its ``repr`` names the key only.

The hot path's record readers (both twins) call :func:`open_record` for an
``e`` record, through the process-wide registry of keys the open stores
installed (as compression.py's dictionaries).
"""
from __future__ import annotations

import base64
import binascii
import os
import stat
import threading
import tomllib
from dataclasses import dataclass, field

import msgspec
from blake3 import blake3
from ..errors import ApiError

TAG_SEALED = 0x65  # e
_SEALED = bytes((TAG_SEALED,))
HASH_SIZE = 32
KEY_ID_SIZE = 8
NONCE_SIZE = 12
KEY_SIZE = 32
TAG_SIZE = 16
SCOPE_SIZE = 8
HEADER = 1 + KEY_ID_SIZE + NONCE_SIZE
ENV_VAR = "SIDECAR_ENCRYPTION_KEYS"
_AD = b"agentstate.v1 sealed"
_CHECK = b"agentstate.v1 key check"
#: Stored node tags that are sealed: value, compressed value, chunk (they hold the bytes clients sent).
SEALED_TAGS = frozenset((0x76, 0x7A, 0x63))
META_KEY = b"enckey:"  # + key id -> msgpack [namespace, name, check]
META_NS = b"encns:"  # + namespace -> b"" (the namespace has had a key)


class KeyFileError(ValueError):
    """The key file (or variable) is not valid; the message never holds key material."""


def key_id(namespace: str, name: str) -> bytes:
    return blake3(b"agentstate.v1 key id\0" + namespace.encode() + b"\0" + name.encode()).digest()[:KEY_ID_SIZE]


def scope_prefix(namespace: str) -> bytes:
    """The 8 bytes an encrypted namespace's hash index keys start with."""
    return blake3(b"agentstate.v1 node scope\0" + namespace.encode()).digest()[:SCOPE_SIZE]


def new_key() -> str:
    """A fresh key for the key file: base64 of 32 random bytes."""
    return base64.b64encode(os.urandom(KEY_SIZE)).decode()


class Key:
    """One namespace key. Holds the AEAD, never exposes the material."""

    __slots__ = ("namespace", "name", "id", "_aead", "check")

    def __init__(self, namespace: str, name: str, material: bytes) -> None:
        # imported here: a sidecar without keys does not pay for loading cryptography at start
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: PLC0415
        self.namespace = namespace
        self.name = name
        self.id = key_id(namespace, name)
        self._aead = AESGCM(material)
        self.check = blake3(_CHECK, key=material).digest()[:16]

    def __repr__(self) -> str:
        return f"Key(namespace={self.namespace!r}, id={self.name!r})"

    def seal(self, h: bytes, stored: bytes) -> bytes:
        nonce = os.urandom(NONCE_SIZE)
        return _SEALED + self.id + nonce + self._aead.encrypt(nonce, stored, _AD + self.id + h)

    def open(self, h: bytes, sealed: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag  # noqa: PLC0415 - loaded with AESGCM (see __init__)
        nonce = sealed[1 + KEY_ID_SIZE:HEADER]
        try:
            return self._aead.decrypt(nonce, sealed[HEADER:], _AD + self.id + h)
        except InvalidTag:
            raise ApiError("ENCRYPTED_RECORD_INVALID",
                           f"a stored value of namespace {self.namespace!r} does not authenticate under its key "
                           f"{self.name!r}: the record was altered, or the key file holds other key material "
                           "under that name", namespace=self.namespace, key_id=self.name, node=h.hex()) from None


@dataclass
class Scope:
    """What writing a node in one encrypted namespace needs: its index prefix and its current key."""

    namespace: str
    prefix: bytes
    current: Key

    def seal(self, h: bytes, stored: bytes) -> bytes:
        return self.current.seal(h, stored)

    def tag(self) -> bytes:
        """The ``nodescope`` value of this namespace's records."""
        return self.prefix + self.namespace.encode()


@dataclass
class KeyRing:
    """The keys of every encrypted namespace (file order: the last one of a namespace is its current key)."""

    keys: dict[str, list[Key]] = field(default_factory=dict)
    source: str = ""

    def __post_init__(self) -> None:
        self.by_id = {k.id: k for ks in self.keys.values() for k in ks}
        self._scopes = {ns: Scope(ns, scope_prefix(ns), ks[-1]) for ns, ks in self.keys.items()}

    def scope(self, namespace: str) -> Scope | None:
        return self._scopes.get(namespace)

    def namespaces(self) -> list[str]:
        return sorted(self.keys)

    def __repr__(self) -> str:
        return f"KeyRing({', '.join(f'{ns}: {len(ks)} keys' for ns, ks in sorted(self.keys.items()))})"


def parse(text: str, source: str = "key file") -> KeyRing:
    """The key ring a key file's text describes; KeyFileError (naming entries, never key material)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise KeyFileError(f"{source}: not valid TOML ({e})") from None
    unknown = set(doc) - {"key"}
    if unknown:
        raise KeyFileError(f"{source}: unknown table(s) {sorted(unknown)}; only [[key]] entries are allowed")
    entries = doc.get("key", [])
    if not isinstance(entries, list):
        raise KeyFileError(f"{source}: 'key' must be an array of tables ([[key]])")
    keys: dict[str, list[Key]] = {}
    seen: set[tuple[str, str]] = set()
    for n, entry in enumerate(entries, 1):
        where = f"{source}: [[key]] entry {n}"
        if not isinstance(entry, dict):
            raise KeyFileError(f"{where}: not a table")
        extra = set(entry) - {"namespace", "id", "key"}
        if extra:
            raise KeyFileError(f"{where}: unknown field(s) {sorted(extra)}")
        ns, name, material = entry.get("namespace"), entry.get("id"), entry.get("key")
        if not isinstance(ns, str) or not ns:
            raise KeyFileError(f"{where}: 'namespace' must be a non-empty string")
        if not isinstance(name, str) or not name or len(name) > 128:
            raise KeyFileError(f"{where} (namespace {ns!r}): 'id' must be a string of 1-128 characters")
        if (ns, name) in seen:
            raise KeyFileError(f"{where}: namespace {ns!r} lists key id {name!r} twice")
        seen.add((ns, name))
        if not isinstance(material, str):
            raise KeyFileError(f"{where} (namespace {ns!r}, id {name!r}): 'key' must be a base64 string")
        try:
            raw = base64.b64decode(material.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise KeyFileError(f"{where} (namespace {ns!r}, id {name!r}): 'key' is not valid base64") from None
        if len(raw) != KEY_SIZE:
            raise KeyFileError(f"{where} (namespace {ns!r}, id {name!r}): 'key' must decode to {KEY_SIZE} bytes "
                               f"(AES-256), not {len(raw)}")
        keys.setdefault(ns, []).append(Key(ns, name, raw))
    return KeyRing(keys, source)


def load(path: str | None, environ=os.environ) -> KeyRing | None:
    """The key ring of ``path`` or, without one, of ``$SIDECAR_ENCRYPTION_KEYS``; None when neither is set."""
    if path:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        return parse(text, path)
    text = environ.get(ENV_VAR)
    if text:
        return parse(text, f"${ENV_VAR}")
    return None


def loose_mode(path: str) -> bool:
    """Whether group or others may read or write the key file."""
    return bool(os.stat(path).st_mode & (stat.S_IRWXG | stat.S_IRWXO))


# ------------------------------------------------------------------ the process-wide registry

_registry_lock = threading.Lock()
_keys: dict[bytes, Key] = {}  # key id -> key, of every open store's key ring
_known: dict[bytes, tuple[str, str]] = {}  # key id -> (namespace, name), of every key the open stores used
_users: dict[bytes, int] = {}


def install(ring: KeyRing | None, known: dict[bytes, tuple[str, str]]) -> list[bytes]:
    """Make a store's keys (and the names of the keys it used) known to :func:`open_record`; returns what to
    pass to :func:`uninstall`."""
    ids = list(ring.by_id) if ring is not None else []
    with _registry_lock:
        for kid in ids:
            _keys[kid] = ring.by_id[kid]
            _users[kid] = _users.get(kid, 0) + 1
        _known.update(known)
    return ids


def uninstall(ids: list[bytes]) -> None:
    with _registry_lock:
        for kid in ids:
            _users[kid] -= 1
            if not _users[kid]:
                del _users[kid]
                _keys.pop(kid, None)


def key_missing(namespace: str, name: str | None = None) -> ApiError:
    which = f"key {name!r}" if name else "key"
    return ApiError("ENCRYPTION_KEY_MISSING",
                    f"namespace {namespace!r} is encrypted and its {which} is not loaded (--encryption-keys): its "
                    "values cannot be read or written (a removed key makes them unreadable for good)",
                    namespace=namespace, key_id=name)


def is_sealed(record: bytes) -> bool:
    return len(record) > HASH_SIZE and record[HASH_SIZE] == TAG_SEALED


def key_id_of(record: bytes) -> bytes:
    return bytes(record[HASH_SIZE + 1:HASH_SIZE + 1 + KEY_ID_SIZE])


def open_record(record: bytes) -> bytes:
    """The plain record (hash + stored node) of a sealed one. ENCRYPTION_KEY_MISSING when its key is not
    loaded, ENCRYPTED_RECORD_INVALID when it does not authenticate (never garbage)."""
    record = bytes(record)
    h = record[:HASH_SIZE]
    if len(record) < HASH_SIZE + HEADER + TAG_SIZE + 1:
        raise ApiError("ENCRYPTED_RECORD_INVALID", f"sealed record {h.hex()} is too short", node=h.hex())
    kid = record[HASH_SIZE + 1:HASH_SIZE + 1 + KEY_ID_SIZE]
    key = _keys.get(kid)
    if key is None:
        ns, name = _known.get(kid, ("(unknown)", None))
        raise key_missing(ns, name or kid.hex())
    stored = key.open(h, record[HASH_SIZE:])
    if not stored or stored[0] not in SEALED_TAGS:
        raise ApiError("ENCRYPTED_RECORD_INVALID", f"sealed record {h.hex()} holds no value node", node=h.hex())
    return h + stored


def plain(record: bytes) -> bytes:
    """``record`` itself, or the plain form of a sealed one."""
    return open_record(record) if is_sealed(record) else record


# ------------------------------------------------------------------ what a store remembers

_meta_encoder = msgspec.msgpack.Encoder()
_meta_decoder = msgspec.msgpack.Decoder(tuple[str, str, bytes])


def remembered(txn, meta) -> tuple[dict[bytes, tuple[str, str, bytes]], set[str]]:
    """(key id -> (namespace, name, check), encrypted namespaces) recorded in a store's ``meta``."""
    used: dict[bytes, tuple[str, str, bytes]] = {}
    namespaces: set[str] = set()
    cursor = txn.cursor(db=meta)
    if cursor.set_range(META_KEY):
        for k, v in cursor:
            k = bytes(k)
            if not k.startswith(META_KEY):
                break
            used[k[len(META_KEY):]] = _meta_decoder.decode(bytes(v))
    if cursor.set_range(META_NS):
        for k, _ in cursor:
            k = bytes(k)
            if not k.startswith(META_NS):
                break
            namespaces.add(k[len(META_NS):].decode())
    return used, namespaces


def remember(txn, meta, ring: KeyRing) -> None:
    """Record the ring's keys in ``meta``; KeyFileError when a used name now holds other key material."""
    used, _ = remembered(txn, meta)
    for ns, ks in ring.keys.items():
        txn.put(META_NS + ns.encode(), b"", db=meta)
        for k in ks:
            old = used.get(k.id)
            if old is not None:
                if old[2] != k.check:
                    raise KeyFileError(f"{ring.source}: key {k.name!r} of namespace {ns!r} is not the key this "
                                       "store's records under that id were sealed with (other key material)")
                continue
            txn.put(META_KEY + k.id, _meta_encoder.encode((ns, k.name, k.check)), db=meta)


def install_for_reading(ring: KeyRing | None, used: dict[bytes, tuple[str, str, bytes]]) -> list[bytes]:
    """Make ``ring``'s keys (and the names of the keys a store ``used``, from :func:`remembered`) known to
    :func:`open_record` for reading that store, recording nothing in it (``sidecar export --encryption-keys``
    of a data directory); KeyFileError when a key id the store used holds other key material here. Returns
    what to pass to :func:`uninstall`."""
    if ring is not None:
        for ns, ks in ring.keys.items():
            for k in ks:
                old = used.get(k.id)
                if old is not None and old[2] != k.check:
                    raise KeyFileError(f"{ring.source}: key {k.name!r} of namespace {ns!r} is not the key this "
                                       "store's records under that id were sealed with (other key material)")
    return install(ring, {kid: (ns, name) for kid, (ns, name, _) in used.items()})
