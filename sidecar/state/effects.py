"""effects: the two-phase side-effect ledger, its records and rules.

An effect record (``effects``: ns NUL idempotency_key) is PENDING, DONE or
FAILED. UNKNOWN is not stored: it is what a PENDING record is when the lease
it was begun under is no longer live (the run stopped, was re-queued and
re-claimed, or its lease expired), computed whenever the record is read. A
begin on an UNKNOWN effect takes it over for the caller's lease with a
new token; the caller reconciles and then completes or fails it. Tokens make
a late answer of a dead attempt harmless: only the current token finishes an
effect.

Every call is safe to repeat as sent: the holder that began an effect
beginning it again gets the same token and the same answer (PENDING, or
UNKNOWN when its begin took the effect over: ``taken_over``), and finishing
a finished effect with its token returns it unchanged. So a client may retry
them after a lost reply (a sidecar restart) without a request_id.

An index ``effthr`` (tkey + idempotency_key) lists a thread's effects.
States are the numbers of agentstate.v1's EffectState (tests/test_layers.py
checks them against the proto); this layer imports no protobuf.
"""
from __future__ import annotations

from ..errors import ApiError, invalid, run_not_found, thread_not_found
from ..storage import layout, records
from ..storage.layout import EffectRec, RunRec
from ..storage.store import Store, now_us
from . import runstate
from .runstate import RUNNING, Tx

# agentstate.v1.EffectState
PENDING, DONE, FAILED, UNKNOWN = 1, 2, 3, 4
STATE_NAMES = {PENDING: "EFFECT_STATE_PENDING", DONE: "EFFECT_STATE_DONE", FAILED: "EFFECT_STATE_FAILED",
               UNKNOWN: "EFFECT_STATE_UNKNOWN"}


def _live(run, e: EffectRec, now: int) -> bool:
    return (run is not None and run.status == RUNNING and run.lease_id == e.lease_id
            and run.lease_expires_us > now)


def state_of(e: EffectRec, run, now: int) -> int:
    """The effect's state as read: a PENDING effect whose lease is no longer live is UNKNOWN."""
    if e.state == PENDING and not _live(run, e, now):
        return UNKNOWN
    return e.state


def _load(tx: Tx, ns: str, key: str) -> EffectRec | None:
    raw = tx.txn.get(layout.ns_key(ns, key), db=tx.db["effects"])
    return None if raw is None else layout.effect_decoder.decode(raw)


def _save(tx: Tx, ns: str, key: str, e: EffectRec) -> None:
    e.updated_us = tx.now
    tx.txn.put(layout.ns_key(ns, key), layout.encode(e), db=tx.db["effects"])


def begin(tx: Tx, ns: str, ikey: str, run_id: str, lease_id: str, run: RunRec, *, step_id: str,
          description: str, digest: str) -> tuple[EffectRec, int, str]:
    """(record, state to answer, token or "" when the effect is finished) of beginning effect ``ikey`` under
    run ``run_id``'s lease ``lease_id`` (``run``: its record, the holder checked by the caller); renews the
    lease."""
    runstate.renew_lease(tx, ns, run_id, run)
    e = _load(tx, ns, ikey)
    if e is None:
        e = EffectRec(layout.FORMAT_VERSION, PENDING, run.thread_id, run.tkey, run_id, lease_id,
                      step_id, description, digest, runstate.new_token(), None, "", False, 1, tx.now, tx.now, 0)
        _save(tx, ns, ikey, e)
        tx.txn.put(layout.tkey_str_key(run.tkey, ikey), b"", db=tx.db["effthr"])
        return e, PENDING, e.token
    if digest and e.request_digest and digest != e.request_digest:
        raise ApiError("EFFECT_KEY_REUSED", f"idempotency_key {ikey!r} was begun with another request_digest",
                       field="request_digest", idempotency_key=ikey)
    if e.state == DONE or (e.state == FAILED and not e.retryable):
        return e, e.state, ""
    if e.state == PENDING:
        if e.run_id == run_id and e.lease_id == lease_id:  # the same holder asking again:
            again = UNKNOWN if e.taken_over else PENDING     # the same answer as its first begin
            return e, again, e.token
        owner = tx.run(ns, e.run_id)
        if _live(owner, e, tx.now):
            raise ApiError("EFFECT_IN_PROGRESS", f"effect {ikey!r} is pending under run {e.run_id!r}, which is "
                           "still running", run_id=e.run_id, idempotency_key=ikey)
        answer = UNKNOWN
    else:  # FAILED and retryable: begin again
        answer = PENDING
        e.state = PENDING
        e.error = ""
    if e.tkey != run.tkey:
        tx.txn.delete(layout.tkey_str_key(e.tkey, ikey), db=tx.db["effthr"])
        tx.txn.put(layout.tkey_str_key(run.tkey, ikey), b"", db=tx.db["effthr"])
    e.thread_id, e.tkey, e.run_id, e.lease_id = run.thread_id, run.tkey, run_id, lease_id
    e.step_id = step_id or e.step_id
    e.description = description or e.description
    e.request_digest = digest or e.request_digest
    e.token = runstate.new_token()
    e.taken_over = answer == UNKNOWN
    e.begins += 1
    _save(tx, ns, ikey, e)
    return e, answer, e.token


def finish(tx: Tx, ns: str, ikey: str, token: str, *, failed: bool, outcome: bytes | None = None, error: str = "",
           retryable: bool = False, field: str = "") -> tuple[EffectRec, int]:
    """(record, state): complete (or fail) an effect under its current token (calls and puts); ``field``
    names the request field that holds the completion (errors name ``<field>.token`` and so on)."""
    prefix = f"{field}." if field else ""
    e = _load(tx, ns, ikey)
    if e is None:
        raise ApiError("EFFECT_NOT_FOUND", f"no effect with idempotency_key {ikey!r}",
                       field=prefix + "idempotency_key", idempotency_key=ikey)
    if not token:
        raise invalid(prefix + "token", "must not be empty")
    if e.token != token:
        raise ApiError("EFFECT_TOKEN_STALE", f"token is not the current one of effect {ikey!r} (it was taken over)",
                       field=prefix + "token", idempotency_key=ikey)
    target = FAILED if failed else DONE
    if e.state == target:
        return e, e.state  # the same answer again
    if e.state != PENDING:
        raise ApiError("EFFECT_TOKEN_STALE", f"effect {ikey!r} is {STATE_NAMES[e.state]} already",
                       field=prefix + "token", idempotency_key=ikey)
    e.state = target
    e.completed_us = tx.now
    if failed:
        e.error, e.retryable = error, retryable
    else:
        e.outcome = outcome
    _save(tx, ns, ikey, e)
    return e, target


def _run_of(txn, store: Store, ns: str, run_id: str, cache: dict):
    if run_id not in cache:
        raw = txn.get(layout.ns_key(ns, run_id), db=store.db["runs"])
        cache[run_id] = None if raw is None else layout.run_decoder.decode(raw)
    return cache[run_id]


def get(txn, store: Store, ns: str, ikey: str) -> tuple[EffectRec, int]:
    """(record, state as read now) of effect ``ikey``; EFFECT_NOT_FOUND when there is none."""
    raw = txn.get(layout.ns_key(ns, ikey), db=store.db["effects"])
    if raw is None:
        raise ApiError("EFFECT_NOT_FOUND", f"no effect with idempotency_key {ikey!r}", field="idempotency_key",
                       idempotency_key=ikey)
    e = layout.effect_decoder.decode(raw)
    run = _run_of(txn, store, ns, e.run_id, {})
    return e, state_of(e, run, now_us())


def page(txn, store: Store, ns: str, *, thread_id: str, run_id: str, states: set[int], after: str | None,
         size: int, now: int) -> tuple[list[tuple[str, EffectRec, int]], str | None]:
    """One page of a thread's effects (of thread ``thread_id``, else of run ``run_id``'s thread; only run
    ``run_id``'s when given; only in ``states`` when given), in idempotency_key order after key ``after``:
    ([(idempotency_key, record, state)], the key to continue after, or None at the end)."""
    runs: dict = {}
    if thread_id:
        trec = records.thread(txn, store, ns, thread_id)
        if trec is None:
            raise thread_not_found(ns, thread_id)
        tkey = trec.tkey
    else:
        run = _run_of(txn, store, ns, run_id, runs)
        if run is None:
            raise run_not_found(ns, run_id)
        tkey = run.tkey
    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=store.db["effthr"])
    found = cursor.set_range(prefix + after.encode() + b"\x00" if after is not None else prefix)
    out: list[tuple[str, EffectRec, int]] = []
    last = None
    while found and cursor.key().startswith(prefix):
        ikey = bytes(cursor.key()[8:]).decode()
        raw = txn.get(layout.ns_key(ns, ikey), db=store.db["effects"])
        if raw is not None:
            e = layout.effect_decoder.decode(raw)
            if e.tkey == tkey and (not run_id or e.run_id == run_id):
                state = state_of(e, _run_of(txn, store, ns, e.run_id, runs), now)
                if not states or state in states:
                    if len(out) == size:
                        return out, last
                    out.append((ikey, e, state))
        last = ikey
        found = cursor.next()
    return out, None


def delete_thread_effects(txn, store: Store, ns: str, tkey: int) -> None:
    """Delete a thread's effects (those whose record still names the thread) and its effect index."""
    db = store.db
    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=db["effthr"])
    keys = []
    if cursor.set_range(prefix):
        for key in cursor.iternext(values=False):
            if not key.startswith(prefix):
                break
            keys.append(bytes(key[8:]).decode())
    for ikey in keys:
        ekey = layout.ns_key(ns, ikey)
        raw = txn.get(ekey, db=db["effects"])
        if raw is not None and layout.effect_decoder.decode(raw).tkey == tkey:
            txn.delete(ekey, db=db["effects"])
    records.delete_prefix(txn, db["effthr"], prefix)


def count_by_state(txn, store: Store, now: int) -> dict[int, int]:
    """{EffectState as read now: effects in it} over every namespace (a PENDING effect whose lease is gone
    counts as UNKNOWN): one pass over the effects."""
    counts: dict[int, int] = {}
    runs: dict[str, dict] = {}  # namespace -> run id -> record
    decode = layout.effect_decoder.decode
    for key, raw in txn.cursor(db=store.db["effects"]).iternext():
        e = decode(raw)
        state = e.state
        if state == PENDING:
            ns = bytes(key).split(layout.SEP, 1)[0].decode()
            state = state_of(e, _run_of(txn, store, ns, e.run_id, runs.setdefault(ns, {})), now)
        counts[state] = counts.get(state, 0) + 1
    return counts
