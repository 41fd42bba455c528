"""resume: ThreadService.ResumeThread — the server side of the NEW_RUN failure policy (docs/lifecycle.md).

One write transaction reads the latest checkpoint at the reader's schema version (state/schemas.on_read with
the parent-chain fallback, as GetCheckpoint) and, when the answer is MIGRATION_STATUS_NEW_RUN, creates a run
starting from the ancestor that migrates (api/runs.create_in, the CreateRun write), its metadata linking it to
the checkpoint that did not: so the read and the run agree, and a retried request_id gets the first answer.
"""
from __future__ import annotations

import dataclasses

import msgspec

from agentstate.v1 import threads_pb2 as pb

from ..errors import invalid
from ..state import checkpoints, schemas
from ..storage import metadata as md
from ..storage import nodes
from . import context, runs, validate, wire
from .checkpoints import fill_checkpoint
from .context import Ctx

LINK_KEYS = ("new_run_from", "schema", "schema_version", "reason")
_enc = msgspec.msgpack.Encoder()


async def resume_thread(ctx: Ctx, req: pb.ResumeThreadRequest) -> pb.ResumeThreadResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    cns = validate.checkpoint_ns(req.checkpoint_ns)
    if req.read_schema_version < 1:
        raise invalid("read_schema_version", "is required (at least 1)")
    r = req.run
    for name in ("namespace", "thread_id", "checkpoint_ns", "start_checkpoint_id", "request_id"):
        if getattr(r, name):
            raise invalid(f"run.{name}", "must be empty (it comes from the request and the checkpoint that migrates)")
    own = wire.metadata_items(r.metadata, "run.metadata")
    for k in LINK_KEYS:
        if k in own:
            raise invalid(f"run.metadata[{k!r}]", "is set by the server (the link to the old chain)")
    run_id, spec, branch_id = runs.create_input(ctx, r, cns, "", field="run")
    store = ctx.store

    def apply(tx):
        txn = tx.txn
        rec, cid, m = checkpoints.resolve(txn, store, ns, thread_id, cns, "")
        fetch = nodes.fetcher(txn, store)
        cid, m, outcome = schemas.on_read(txn, store, ns, rec.tkey, cns, cid, m, fetch, req.read_schema_version,
                                          fallback=True, writes=req.include_pending_writes)
        resp = pb.ResumeThreadResponse()
        fill_checkpoint(resp.checkpoint, txn, store, ns, thread_id, rec.tkey, cns, cid, m, fetch, values=True,
                        pending_writes=req.include_pending_writes, extra=True, outcome=outcome)
        if outcome.status == schemas.STATUS_NEW_RUN:
            link = {"new_run_from": outcome.unmigratable_id, "schema": m.schema,
                    "schema_version": req.read_schema_version, "reason": outcome.error}
            items = {**own, **{k: _enc.encode(v) for k, v in link.items()}}
            run_spec = dataclasses.replace(spec, start_checkpoint_id=cid,
                                           metadata=md.encode(items, "run.metadata"))
            resp.run.CopyFrom(runs.create_in(tx, ns, thread_id, run_id, run_spec, branch_id, r))
        return resp

    return await context.write(ctx, ns, "ResumeThread", req, pb.ResumeThreadResponse, apply)
