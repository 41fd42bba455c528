"""puts: a checkpoint put with what a run records beside it, in the put's transaction.

A put that names a run (its holder's ``run_id`` and ``lease_id``) also
records the run's steps, appends its events, completes its effects, moves
the run's last checkpoint forward and renews its lease: all or nothing with
the checkpoint. The rules of each are in their state modules; this one calls
them in order: the checkpoint (state/checkpoints.apply_put, which checks the
holder), then steps, events and effect completions in request order. A put that adds a checkpoint is
then held to its thread's retention limits (ops/retention.check_limits: refused, or pruned by the policy).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..state import checkpoints, effects, events, runstate, steps
from ..state.checkpoints import Applied, PutPlan
from ..state.events import EventInput
from ..state.runstate import Tx
from ..state.steps import StepInput
from ..storage.layout import EffectRec, EventRec, RunRec, StepRec
from ..storage.store import Store
from . import retention


@dataclass
class RunRecords:
    """What a run's put records beside the checkpoint, validated (api/checkpoints.run_records):
    steps, events and effect completions (the keyword arguments of ``state.effects.finish``)."""

    steps: list[StepInput] = field(default_factory=list)
    events: list[EventInput] = field(default_factory=list)
    completions: list[dict] = field(default_factory=list)


@dataclass
class Recorded:
    """What a run's put recorded: (step id, step), (sequence, event), (key, effect, state), in request order."""

    run: RunRec
    steps: list[tuple[str, StepRec]]
    events: list[tuple[int, EventRec]]
    effects: list[tuple[str, EffectRec, int]]


def put(tx: Tx, store: Store, plan: PutPlan, run_id: str, lease_id: str, extra: RunRecords | None,
        ) -> tuple[Applied, Recorded | None]:
    """Write a planned put and, for a run's put, what the run records with it (``extra``; None or empty:
    nothing). Returns what the checkpoint write did and, for a run's put, what was recorded."""
    applied, run = checkpoints.apply_put(tx, store, plan, run_id, lease_id)
    if applied.created:
        retention.check_limits(tx, store, plan.ns, plan.thread_id, applied.tkey)
    if run is None:
        return applied, None
    extra = extra if extra is not None else RunRecords()
    ns = plan.ns
    done = Recorded(run, [], [], [])
    for i, step in enumerate(extra.steps):
        done.steps.append(steps.record_step(tx, ns, run_id, run, step, f"steps[{i}]", upsert=True))
    done.events, _ = events.append(tx, ns, plan.thread_id, applied.tkey, extra.events, run_id, "events")
    for kw in extra.completions:
        e, state = effects.finish(tx, ns, **kw)
        done.effects.append((kw["ikey"], e, state))
    checkpoints.record_run_checkpoint(plan, run)
    runstate.renew_lease(tx, ns, run_id, run)
    return applied, done
