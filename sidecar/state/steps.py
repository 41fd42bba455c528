"""steps: the steps a run records (model calls, tool calls, ...) and what they cost.

A step is a row ``tkey run_seq step_id`` of the ``steps`` table: its kind,
name, input and output (a digest and/or a small body), error, resource
counters, start and end time (0 while open) and the run's attempt. Its
counters add to the run's usage and to its thread's (the run record and the
thread run state, state/runstate.py); a new step that would take the run over
one of its budgets is refused (BUDGET_EXCEEDED). A step without a wall time
gets its duration.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from agentstate import ids

from ..errors import ApiError, invalid
from ..storage import layout, records
from ..storage.layout import Counters, RunRec, StepRec
from ..storage.store import Store
from . import runstate
from .runstate import Tx


@dataclass
class StepInput:
    """A StepRecord's fields, validated (api/runs.step_input). Empty strings are unset; ``start_us`` and
    ``end_us`` are None when not given (the transaction's time then), ``end_us`` also when the step
    stays open."""

    step_id: str  # "": the server makes one
    kind: int
    name: str
    input_digest: str
    input_body: bytes | None  # canonical encoding
    output_digest: str
    output_body: bytes | None
    error: str
    counters: Counters
    start_us: int | None
    end_us: int | None
    open: bool = False  # the step stays open (it is ended later)


@dataclass
class StepEnd:
    """What ends an open step, validated (api/runs.step_end): ``end_us`` None is the transaction's time."""

    output_digest: str
    output_body: bytes | None
    counters: Counters
    end_us: int | None
    error: str


def check_budget(rec: RunRec, add) -> None:
    for i, name in enumerate(runstate.COUNTER_NAMES):
        b = rec.budget[i]
        if b and (rec.usage[i] >= b or rec.usage[i] + add[i] > b):
            raise ApiError("BUDGET_EXCEEDED", f"the step would take the run's {name} to {rec.usage[i] + add[i]}, "
                           f"over its budget of {b}", budget=name, run_id=None)


def _add_usage(tx: Tx, ns: str, run_id: str, rec: RunRec, delta, new_steps: int) -> None:
    rec.usage = runstate.add_counters(rec.usage, delta)
    rec.steps += new_steps
    tx.put_run(ns, run_id, rec)
    st = tx.state_of(ns, rec)
    st.usage = runstate.add_counters(st.usage, delta)
    st.steps += new_steps
    tx.touch(ns, rec)


def record_step(tx: Tx, ns: str, run_id: str, rec: RunRec, step: StepInput, field: str, *,
                upsert: bool, start_only: bool = False) -> tuple[str, StepRec]:
    """(step id, record): store a step of a running run (StartStep with ``start_only``, RecordStep, puts).

    A step the run has already is refused (STEP_ALREADY_EXISTS), or with ``upsert`` (puts) answered as it
    is when it has ended or ``step.open``, else ended with the step's output, error, counters and end
    time. A new step is stored open with ``start_only`` or ``step.open``, else ended (at ``end_us``)."""
    step_id = step.step_id or ids.new_id()
    key = layout.step_key(rec.tkey, rec.seq, step_id)
    db = tx.db["steps"]
    raw = tx.txn.get(key, db=db)
    if raw is not None:
        if not upsert:
            raise ApiError("STEP_ALREADY_EXISTS", f"step {step_id!r} exists in run {run_id!r}",
                           field=f"{field}.step_id", run_id=run_id)
        old = layout.step_decoder.decode(raw)
        if old.end_us or step.open:
            return step_id, old
        end = StepEnd(step.output_digest, step.output_body, step.counters, step.end_us, step.error)
        return step_id, end_step(tx, ns, run_id, rec, step_id, end, field)
    counters = step.counters
    start_us = step.start_us if step.start_us is not None else tx.now
    end_us = 0
    if not (start_only or step.open):
        end_us = step.end_us if step.end_us is not None else tx.now
        if end_us < start_us:
            raise invalid(f"{field}.end_time", "is before start_time")
        if not counters[3]:
            counters = (*counters[:3], (end_us - start_us) // 1000, counters[4])
    check_budget(rec, counters)
    s = StepRec(layout.FORMAT_VERSION, step.kind, step.name, step.input_digest, step.input_body,
                step.output_digest, step.output_body, step.error, counters, start_us, end_us, rec.attempt)
    tx.txn.put(key, layout.encode(s), db=db)
    _add_usage(tx, ns, run_id, rec, counters, 1)
    return step_id, s


def end_step(tx: Tx, ns: str, run_id: str, rec: RunRec, step_id: str, end: StepEnd, field: str = "") -> StepRec:
    """End an open step of run ``run_id`` (STEP_NOT_FOUND, STEP_ENDED); its counters replace the step's."""
    prefix = f"{field}." if field else ""
    key = layout.step_key(rec.tkey, rec.seq, step_id)
    raw = tx.txn.get(key, db=tx.db["steps"])
    if raw is None:
        raise ApiError("STEP_NOT_FOUND", f"no step {step_id!r} in run {run_id!r}", field=prefix + "step_id",
                       run_id=run_id)
    s = layout.step_decoder.decode(raw)
    if s.end_us:
        raise ApiError("STEP_ENDED", f"step {step_id!r} of run {run_id!r} has ended already",
                       field=prefix + "step_id", run_id=run_id)
    used = end.counters
    end_us = end.end_us if end.end_us is not None else tx.now
    if end_us < s.start_us:
        raise invalid(prefix + "end_time", "is before the step's start_time")
    if not used[3]:
        used = (*used[:3], (end_us - s.start_us) // 1000, used[4])
    delta = runstate.sub_counters(used, s.counters)
    s.output_digest, s.output_body = end.output_digest, end.output_body
    s.error = end.error
    s.counters = used
    s.end_us = end_us
    tx.txn.put(key, layout.encode(s), db=tx.db["steps"])
    _add_usage(tx, ns, run_id, rec, delta, 0)
    return s


def of_run(txn, store: Store, rec: RunRec, after: str | None = None) -> Iterator[tuple[str, StepRec]]:
    """(step id, record) of a run's steps in id order, after step ``after`` (a page's last)."""
    prefix = layout.step_prefix(rec.tkey, rec.seq)
    cursor = txn.cursor(db=store.db["steps"])
    found = cursor.set_range(prefix + after.encode() + b"\x00" if after is not None else prefix)
    while found and cursor.key().startswith(prefix):
        yield bytes(cursor.key()[len(prefix):]).decode(), layout.step_decoder.decode(cursor.value())
        found = cursor.next()


def delete_thread_steps(txn, store: Store, tkey: int) -> None:
    """Delete the steps of every run of a thread."""
    records.delete_prefix(txn, store.db["steps"], layout.tkey_prefix(tkey))
