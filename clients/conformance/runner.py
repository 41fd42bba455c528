#!/usr/bin/env python3
"""The Python runner of the cross-language scenario suite (see README.md).

    runner.py --address ADDR --lang py --run RUN --dir DIR --mode write
    runner.py --address ADDR --lang py --run RUN --dir DIR --mode read --peers ts,go

write: play every scenario in its own namespace (conf-RUN-py), check every expectation,
       and record what it stored (roots, server bytes) in DIR/py.json.
read:  for each peer, replay the recorded reads against the peer's namespace and compare
       values, canonical bytes and content hashes byte for byte with the peer's record and
       with its own.
Prints one line per failed check and a closing line `conformance[py/MODE]: N passed, M failed`.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import grpc  # noqa: E402

from agentstate import AgentStateError, Append, Client, Keep, Opaque, SetKeys, codec  # noqa: E402
from agentstate import schemas as sch  # noqa: E402
from agentstate.conversations import KINDS, context_hash  # noqa: E402
from agentstate.memory import memory_query  # noqa: E402
from agentstate.v1 import conversations_pb2 as cpb, memory_pb2 as mpb, threads_pb2 as pb, values_pb2  # noqa: E402
from agentstate.values import from_value, to_value  # noqa: E402
from describe import from_desc  # noqa: E402

VALUES = json.loads((HERE / "values.json").read_text())["values"]
ENCODINGS = json.loads((HERE / "encodings.json").read_text())["encodings"]


def migration_desc(x) -> list:
    """[MigrationStatus name without its prefix, schema_version, stored_schema_version] of a read's answer."""
    from agentstate.v1 import schemas_pb2
    return [schemas_pb2.MigrationStatus.Name(x.migration).removeprefix("MIGRATION_STATUS_"), x.schema_version,
            x.stored_schema_version]


def scenarios() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((HERE / "scenarios").glob("*.json"))]


def resolve(d: Any) -> Any:
    """Replace {"ref": name} by the named value, recursively; expand $all_values_map."""
    if isinstance(d, dict):
        if set(d) == {"ref"}:
            return resolve(VALUES[d["ref"]])
        if d == {"$all_values_map": True}:
            return {"map": {k: resolve(v) for k, v in VALUES.items()}}
        return {k: resolve(v) for k, v in d.items()}
    if isinstance(d, list):
        return [resolve(x) for x in d]
    return d


def expand_channels(channels: dict) -> dict:
    if channels == {"$each_value": True}:
        return {name: {"value": resolve(desc)} for name, desc in VALUES.items()}
    return channels


def expand_expected(channels: dict) -> dict:
    if channels == {"$each_value": True}:
        return {name: resolve(desc) for name, desc in VALUES.items()}
    return {k: resolve(v) for k, v in channels.items()}


def raw_bytes(spec: str) -> bytes:
    if spec == "$deep65":
        return b"\x91" * 65 + b"\x01"
    return bytes.fromhex(spec)


def value_bytes(v: values_pb2.Value) -> bytes:
    """The canonical bytes this language makes of a Value read from the server."""
    return codec.encode(from_value(v))


class Runner:
    def __init__(self, address: str, lang: str, run: str) -> None:
        self.lang = lang
        self.run = run
        self.address = address
        self.passed = 0
        self.failed = 0
        self.saved: dict[str, str] = {}
        self.records: dict[str, dict] = {}

    def check(self, ok: bool, what: str) -> None:
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL [{self.lang}] {what}")

    def namespace(self, lang: str) -> str:
        return f"conf-{self.run}-{lang}"

    @staticmethod
    def thread(name: str) -> str:
        return name[1:] if name.startswith("=") else name

    # ------------------------------------------------------------ requests

    def write_of(self, spec: dict):
        if "value" in spec:
            return from_desc(resolve(spec["value"]))
        if "append" in spec:
            return Append([from_desc(resolve(x)) for x in spec["append"]], keep_first=spec.get("keep_first"),
                          base_root=bytes.fromhex(spec.get("base_root", "")))
        if "set" in spec or "delete" in spec:
            return SetKeys({k: from_desc(resolve(v)) for k, v in spec.get("set", {}).items()}, spec.get("delete", []))
        if spec.get("keep"):
            return Keep()
        raise ValueError(f"unknown channel write {spec}")

    def put(self, c: Client, step: dict):
        req = pb.PutCheckpointRequest(namespace=c.namespace, thread_id=self.thread(step["thread"]),
                                      checkpoint_ns=step.get("ns", ""), checkpoint_id=step.get("id", ""),
                                      parent_checkpoint_id=step.get("parent", ""),
                                      require_thread=step.get("require_thread", False),
                                      schema=step.get("schema", ""), schema_version=step.get("schema_version", 0))
        from agentstate.values import channel_write, encode_into
        for name, spec in expand_channels(step["channels"]).items():
            if "raw" in spec:
                req.channels[name].value.msgpack = raw_bytes(spec["raw"])
            else:
                channel_write(self.write_of(spec), req.channels[name], f"channels[{name!r}]")
        for k, desc in step.get("metadata", {}).items():
            if "raw" in desc:
                req.metadata[k].msgpack = raw_bytes(desc["raw"])
            else:
                encode_into(from_desc(resolve(desc)), req.metadata[k], f"metadata[{k!r}]")
        etag = step.get("expected_head_etag")
        if etag is not None:
            req.expected_head_etag = self.saved[etag["saved"]] if isinstance(etag, dict) else etag
        return c._call(c.threads.PutCheckpoint, req, None)

    def memory(self, c: Client, step: dict) -> Any:
        """The memory ops (scenarios/02_memory.json, 07_memory_trees.json): memory_put, memory_search (an
        expression ``filter`` or a typed ``tree``), memory_list."""
        op = step["op"]
        if op == "memory_put":
            return c.memory.put(step["path"], step["key"], from_desc(resolve(step["value"])),
                                vectors=step.get("vectors"))
        if op == "memory_search":
            return c.memory.search(step["prefix"], filter=filter_of(step), vector=step.get("vector"),
                                   order=step.get("order"), limit=step.get("limit", 100))
        return list(c.memory.list_namespaces(prefix=step.get("prefix"), max_depth=step.get("max_depth")))

    def do(self, c: Client, step: dict) -> Any:
        op = step["op"]
        if op.startswith("memory_"):
            return self.memory(c, step)
        t = self.thread(step.get("thread", ""))
        meta = lambda key: {k: from_desc(resolve(v)) for k, v in step.get(key, {}).items()}  # noqa: E731
        if op == "register_schema":
            return c.schemas.register(step["name"], [[self.step_of(x) for x in v] for v in step["versions"]],
                                      failure_policy=step.get("failure_policy", "fail"))
        if op == "create_thread":
            th = c.threads.CreateThread  # via client helper for errors
            return c._call(th, self._create_req(c, step), None)
        if op == "get_thread":
            return c.get_thread(t)
        if op == "update_thread":
            etag = step.get("etag")
            return c.update_thread(t, meta("set_metadata"), etag=self.saved[etag["saved"]] if etag else "")
        if op == "delete_thread":
            return c.delete_thread(t)
        if op == "put":
            return self.put(c, step)
        if op == "put_writes":
            req = pb.PutWritesRequest(namespace=c.namespace, thread_id=t, checkpoint_ns=step.get("ns", ""),
                                      checkpoint_id=step["id"])
            for w in step["writes"]:
                pw = req.writes.add(task_id=w["task"], idx=w["idx"], channel=w["channel"], task_path=w.get("path", ""))
                if "raw" in w["value"]:
                    pw.value.msgpack = raw_bytes(w["value"]["raw"])
                else:
                    to_value(from_desc(resolve(w["value"])), pw.value)
            return c._call(c.threads.PutWrites, req, None)
        if op == "get":
            return c.get_checkpoint(t, step.get("id", ""), checkpoint_ns=step.get("ns", ""),
                                    include_pending_writes=step.get("pending", False),
                                    read_schema_version=step.get("read_schema_version", 0))
        if op == "list":
            return list(c.list_checkpoints(t, checkpoint_ns=step.get("ns"), metadata_filter=meta("filter"),
                                           before=step.get("before", ""), limit=step.get("limit", 0),
                                           page_size=step.get("page_size", 0)))
        if op == "diff":
            return c.diff(t, step["from"], step["to"], checkpoint_ns=step.get("ns", ""))
        if op == "copy_thread":
            return c.copy_thread(self.thread(step["source"]), self.thread(step["target"]))
        if op == "prune":
            return c.prune([self.thread(x) for x in step["threads"]], keep_latest=step.get("keep_latest"))
        if op in CONVERSATION_OPS:
            return self.do_conversation(c, op, t, step)
        if op == "same_roots":
            a = c.get_checkpoint(self.thread(step["a"]["thread"]), step["a"]["id"], omit_values=True)
            b = c.get_checkpoint(self.thread(step["b"]["thread"]), step["b"]["id"], omit_values=True)
            return a, b
        raise ValueError(f"unknown op {op}")

    def do_conversation(self, c: Client, op: str, t: str, step: dict) -> Any:
        conv = c.conversations
        if op == "append_items":
            items = []
            for it in step["items"]:
                x = cpb.ItemInput(kind=KINDS[it["kind"]], role=it.get("role", ""), call_id=it.get("call_id", ""),
                                  tool_name=it.get("tool_name", ""), client_item_id=it.get("client_item_id", ""),
                                  schema=it.get("schema", ""), schema_version=it.get("schema_version", 0))
                to_value(from_desc(resolve(it["content"])), x.content)
                if "tokens" in it:
                    x.tokens.count, x.tokens.tokenizer, x.tokens.exact = it["tokens"]
                items.append(x)
            return conv.append(t, items, expected_last_seq=step.get("expected_last_seq"),
                               create_thread=step.get("create_thread", False),
                               read_schema_version=step.get("read_schema_version", 0))
        if op == "set_compaction_policy":
            p = dict(step["policy"])
            if "fallback_after_ms" in p:
                p["fallback_after"] = p.pop("fallback_after_ms") / 1000
            return conv.set_compaction_policy(thread_id=t, **p)
        if op == "pop_item":
            return conv.pop(t)
        if op == "latest":
            return conv.latest(t, step["n"], read_schema_version=step.get("read_schema_version", 0))
        if op == "set_pin":
            return conv.set_pin(step["pin_id"], step["kind"], from_desc(resolve(step["content"])), thread_id=t,
                                position=step.get("position", 0), role=step.get("role", ""),
                                tokens=tuple(step["tokens"]) if "tokens" in step else None)
        return self.get_context(c, t, step)

    def get_context(self, c: Client, t: str, step: dict):
        mq = step.get("memory_query")
        query = None if mq is None else memory_query(mq["prefix"], filter=filter_of(mq), vector=mq.get("vector"),
                                                       order=mq.get("order"), limit=mq.get("limit", 10))
        return c.conversations.get_context(t, step["budget"], knowledge=[self._knowledge(k) for k in step.get("knowledge", [])],
                                           tokenizer=step.get("tokenizer", ""),
                                           keep_last_items=step.get("keep_last_items"), memory_query=query)

    @staticmethod
    def step_of(d: dict):
        """A MigrationStep of a scenario: {"rename": path, "to": name}, {"convert": path, "to": type},
        {"nest": fields, "into": name}, {"add": path, "default": value}."""
        if "rename" in d:
            return sch.rename(d["rename"], d["to"])
        if "convert" in d:
            return sch.convert(d["convert"], d["to"])
        if "nest" in d:
            return sch.nest(d["nest"], d["into"])
        if "add" in d:
            return sch.add(d["add"], from_desc(resolve(d["default"])))
        raise ValueError(f"unknown migration step {d}")

    @staticmethod
    def _knowledge(desc) -> cpb.KnowledgeItem:
        x = cpb.KnowledgeItem(kind=cpb.ITEM_KIND_MESSAGE)
        to_value(from_desc(resolve(desc)), x.content)
        return x

    @staticmethod
    def context_record(thread: str, step: dict, ctx) -> dict:
        return {"kind": "context", "thread": thread, "budget": step["budget"], "hash": ctx.context_hash.hex(),
                "items": [[i.source, i.kind, i.role, i.call_id, i.tool_name, value_bytes(i.content).hex()]
                          for i in ctx.items]}

    def _create_req(self, c: Client, step: dict) -> pb.CreateThreadRequest:
        policy = {"error": pb.IF_EXISTS_ERROR, "return": pb.IF_EXISTS_RETURN, "merge": pb.IF_EXISTS_MERGE_METADATA}
        req = pb.CreateThreadRequest(namespace=c.namespace, thread_id=self.thread(step["thread"]),
                                     if_exists=policy[step.get("if_exists", "error")])
        for k, v in step.get("metadata", {}).items():
            req.metadata[k].msgpack = codec.encode(from_desc(resolve(v)))
        return req

    # ------------------------------------------------------------ expectations

    def same_value(self, got: values_pb2.Value, desc: dict, what: str) -> None:
        want = codec.encode(from_desc(resolve(desc)))
        mine = value_bytes(got)
        self.check(mine == want, f"{what}: value {mine.hex()[:80]} != expected {want.hex()[:80]}")
        if got.WhichOneof("kind") == "msgpack":
            self.check(got.msgpack == mine, f"{what}: server bytes {got.msgpack.hex()[:80]} != re-encoded {mine.hex()[:80]}")

    def expect(self, where: str, step: dict, result: Any, error: AgentStateError | None) -> None:
        exp = step.get("expect", {})
        if "error" in exp:
            e = exp["error"]
            if error is None:
                self.check(False, f"{where}: expected {e}, call succeeded")
                return
            self.check(error.code.name == e["code"], f"{where}: code {error.code.name} != {e['code']} ({error})")
            if "reason" in e:
                self.check(error.reason == e["reason"], f"{where}: reason {error.reason} != {e['reason']}")
            if "field" in e:
                self.check(error.field == e["field"], f"{where}: field {error.field} != {e['field']}")
            for k, v in e.get("metadata", {}).items():
                self.check(error.metadata.get(k) == v, f"{where}: metadata {k}={error.metadata.get(k)} != {v}")
            return
        if error is not None:
            self.check(False, f"{where}: unexpected error {error} {error.metadata}")
            return
        self.passed += 1  # the call itself succeeded as expected
        op = step["op"]
        if "save" in step:
            self.saved[step["save"]] = {"put": lambda: result.checkpoint.etag,
                                        "create_thread": lambda: result.thread.etag}.get(op, lambda: result.etag)()
        if op == "create_thread" and "created" in exp:
            self.check(result.created == exp["created"], f"{where}: created {result.created}")
        if op in ("create_thread", "get_thread", "update_thread") and "metadata" in exp:
            th = result.thread if op == "create_thread" else result
            self.check(set(th.metadata) == set(exp["metadata"]), f"{where}: metadata keys {sorted(th.metadata)}")
            for k, d in exp["metadata"].items():
                if k in th.metadata:
                    self.same_value(th.metadata[k], d, f"{where}: metadata[{k}]")
        if op == "put" and "created" in exp:
            self.check(result.created == exp["created"], f"{where}: created {result.created}")
        if op == "put_writes":
            self.check((result.stored, result.kept) == (exp.get("stored", result.stored), exp.get("kept", result.kept)),
                       f"{where}: stored/kept {result.stored}/{result.kept}")
        if op == "delete_thread" and "deleted" in exp:
            self.check(result.deleted == exp["deleted"], f"{where}: deleted {result.deleted}")
        if op == "copy_thread" and "copied" in exp:
            self.check(result.copied_checkpoints == exp["copied"], f"{where}: copied {result.copied_checkpoints}")
        if op == "prune" and "deleted" in exp:
            self.check(result == exp["deleted"], f"{where}: pruned {result}")
        if op == "list":
            ids = [cp.checkpoint_id for cp in result]
            self.check(ids == exp["ids"], f"{where}: ids {ids} != {exp['ids']}")
        if op == "diff":
            got = [self.change_desc(ch, want) for ch, want in zip(sorted(result, key=lambda x: x.channel), exp["changes"])]
            self.check(len(result) == len(exp["changes"]) and got == exp["changes"],
                       f"{where}: changes {got} != {exp['changes']}")
        if op == "same_roots":
            a, b = result
            ra = {k: v.root for k, v in a.channels.items()}
            rb = {k: v.root for k, v in b.channels.items()}
            self.check(ra == rb and ra, f"{where}: roots differ {ra} {rb}")
        if op == "get":
            self.expect_checkpoint(where, result, exp)
        if op == "append_items":
            for k in ("last_seq", "duplicates"):
                if k in exp:
                    self.check(getattr(result, k) == exp[k], f"{where}: {k} {getattr(result, k)} != {exp[k]}")
            if "migrations" in exp:
                got = [migration_desc(x) for x in result.items]
                self.check(got == exp["migrations"], f"{where}: migrations {got} != {exp['migrations']}")
        if op == "pop_item" and "seq" in exp:
            self.check(result is not None and result.seq == exp["seq"], f"{where}: popped {result}")
        if op == "latest":
            seqs = [i.seq for i in result]
            self.check(seqs == exp["seqs"], f"{where}: seqs {seqs} != {exp['seqs']}")
            for i, (x, d) in enumerate(zip(result, exp.get("contents", []))):
                self.same_value(x.content, d, f"{where}: item {i} content")
            if "contents" in exp:
                self.check(len(result) == len(exp["contents"]), f"{where}: {len(result)} items")
        if op == "get_context":
            self.check(context_hash(result.items) == result.context_hash,
                       f"{where}: context hash computed here differs from the server's")
            self.check(result.total_tokens <= step["budget"], f"{where}: over budget {result.total_tokens}")
            got = context_desc(result)
            for k in exp:
                self.check(got[k] == exp[k], f"{where}: {k} {got[k]} != {exp[k]}")
        if op == "memory_put" and "created" in exp:
            self.check(result.created == exp["created"], f"{where}: created {result.created}")
        if op == "memory_search":
            keys = [["/".join(s.item.path), s.item.key] for s in result]
            self.check(keys == exp["keys"], f"{where}: keys {keys} != {exp['keys']}")
        if op == "memory_list":
            paths = ["/".join(p) for p in result]
            self.check(paths == exp["paths"], f"{where}: paths {paths} != {exp['paths']}")

    @staticmethod
    def change_desc(ch: pb.ChannelChange, want: dict) -> dict:
        full = {"channel": ch.channel, "kind": pb.ChangeKind.Name(ch.kind).removeprefix("CHANGE_KIND_"),
                "lists": ch.lists, "appended": ch.appended, "from_length": ch.from_length,
                "to_length": ch.to_length, "common_prefix": ch.common_prefix}
        return {k: full[k] for k in want}

    def expect_checkpoint(self, where: str, cp: pb.Checkpoint, exp: dict) -> None:
        if "migration" in exp:
            got = migration_desc(cp)
            self.check(got == exp["migration"], f"{where}: migration {got} != {exp['migration']}")
        if "id" in exp:
            self.check(cp.checkpoint_id == exp["id"], f"{where}: id {cp.checkpoint_id}")
        if "parent" in exp:
            self.check(cp.parent_checkpoint_id == exp["parent"], f"{where}: parent {cp.parent_checkpoint_id}")
        if "channels" in exp:
            want = expand_expected(exp["channels"])
            self.check(set(cp.channels) == set(want), f"{where}: channels {sorted(cp.channels)}")
            for name, d in want.items():
                if name in cp.channels:
                    self.same_value(cp.channels[name].value, d, f"{where}: channel {name}")
        if "metadata" in exp:
            self.check(set(cp.metadata) == set(exp["metadata"]), f"{where}: metadata keys {sorted(cp.metadata)}")
            for k, d in exp["metadata"].items():
                if k in cp.metadata:
                    self.same_value(cp.metadata[k], d, f"{where}: metadata[{k}]")
        if "pending_writes" in exp:
            got = list(cp.pending_writes)
            want = exp["pending_writes"]
            self.check([(w.task_id, w.idx, w.channel) for w in got] == [(w["task"], w["idx"], w["channel"]) for w in want],
                       f"{where}: pending writes {[(w.task_id, w.idx, w.channel) for w in got]}")
            for w, d in zip(got, want):
                self.same_value(w.value, d["value"], f"{where}: write {w.task_id}/{w.idx}")

    @staticmethod
    def record_of(cp: pb.Checkpoint) -> dict:
        def vb(v: values_pb2.Value) -> str:
            # The form the server answered with, and the canonical bytes of the decoded value.
            return f"{v.WhichOneof('kind')}:{value_bytes(v).hex()}"
        return {"thread": cp.thread_id, "ns": cp.checkpoint_ns, "id": cp.checkpoint_id, "etag": cp.etag,
                "channels": {k: {"root": v.root.hex(), "value": vb(v.value)} for k, v in sorted(cp.channels.items())},
                "metadata": {k: vb(v) for k, v in sorted(cp.metadata.items())},
                "writes": [[w.task_id, w.idx, w.channel, vb(w.value)] for w in cp.pending_writes]}

    # ------------------------------------------------------------ passes

    def codec_checks(self) -> None:
        for name, desc in VALUES.items():
            mine = codec.encode(from_desc(desc)).hex()
            self.check(mine == ENCODINGS[name], f"encode {name}: {mine} != pinned {ENCODINGS[name]}")
            again = codec.encode(codec.decode(bytes.fromhex(ENCODINGS[name]))).hex()
            self.check(again == ENCODINGS[name], f"decode+encode {name}: {again}")

    def write_pass(self) -> dict:
        self.codec_checks()
        with Client(self.address, namespace=self.namespace(self.lang)) as c:
            for sc in scenarios():
                for i, step in enumerate(sc["steps"]):
                    where = f"{sc['name']}#{i} {step['op']}"
                    result, error = None, None
                    try:
                        result = self.do(c, step)
                    except AgentStateError as e:
                        error = e
                    self.expect(where, step, result, error)
                    if "record" in step and error is None:
                        self.records[f"{sc['name']}/{step['record']}"] = (
                            self.context_record(self.thread(step["thread"]), step, result)
                            if step["op"] == "get_context" else self.record_of(result))
        return {"lang": self.lang, "namespace": self.namespace(self.lang), "records": self.records}

    def read_pass(self, own: dict, peer: dict) -> None:
        steps = {f"{sc['name']}/{st['record']}": (sc, st) for sc in scenarios() for st in sc["steps"] if "record" in st}
        with Client(self.address, namespace=peer["namespace"]) as c:
            for label, rec in sorted(peer["records"].items()):
                sc, step = steps[label]
                where = f"read {peer['lang']}:{label}"
                if rec.get("kind") == "context":
                    ctx = self.get_context(c, rec["thread"], step)
                    mine = self.context_record(rec["thread"], step, ctx)
                    self.check(mine == rec, f"{where}: context differs from what {peer['lang']} recorded")
                    ours = own["records"].get(label)
                    self.check(ours is not None and ours["hash"] == rec["hash"] and ours["items"] == rec["items"],
                               f"{where}: context bytes or hash differ from {self.lang}'s own write")
                    self.check(context_hash(ctx.items).hex() == rec["hash"], f"{where}: hash recomputed here differs")
                    continue
                cp = c.get_checkpoint(rec["thread"], rec["id"], checkpoint_ns=rec["ns"],
                                      include_pending_writes=step.get("pending", False))
                self.expect_checkpoint(where, cp, step.get("expect", {}))
                mine = self.record_of(cp)
                self.check(mine == rec, f"{where}: checkpoint differs from what {peer['lang']} recorded")
                ours = own["records"].get(label)
                self.check(ours is not None and {k: v["root"] for k, v in ours["channels"].items()}
                           == {k: v["root"] for k, v in rec["channels"].items()},
                           f"{where}: root hashes differ from {self.lang}'s own write")
                self.check(ours is not None and ours["etag"] == rec["etag"],
                           f"{where}: etag differs from {self.lang}'s own write")
                self.check(ours is not None and ours["metadata"] == rec["metadata"] and
                           [w[1:] for w in ours["writes"]] == [w[1:] for w in rec["writes"]],
                           f"{where}: metadata or writes differ from {self.lang}'s own write")
                # Decode every value and re-encode it: the same bytes in this language.
                for name, ch in cp.channels.items():
                    b = value_bytes(ch.value)
                    if ch.value.WhichOneof("kind") == "msgpack":
                        self.check(b == ch.value.msgpack, f"{where}: {name} re-encoded differently")


OPERATORS = {"eq": mpb.FILTER_OPERATOR_EQ, "ne": mpb.FILTER_OPERATOR_NE, "gt": mpb.FILTER_OPERATOR_GT,
             "gte": mpb.FILTER_OPERATOR_GTE, "lt": mpb.FILTER_OPERATOR_LT, "lte": mpb.FILTER_OPERATOR_LTE,
             "in": mpb.FILTER_OPERATOR_IN, "nin": mpb.FILTER_OPERATOR_NIN, "exists": mpb.FILTER_OPERATOR_EXISTS,
             "is_type": mpb.FILTER_OPERATOR_IS_TYPE, "length_eq": mpb.FILTER_OPERATOR_LENGTH_EQ}
MODES = {"agentstate": mpb.COMPARISON_MODE_AGENTSTATE, "python": mpb.COMPARISON_MODE_LANGGRAPH_PYTHON,
         "js": mpb.COMPARISON_MODE_LANGGRAPH_JS}


def tree_of(d: dict) -> mpb.MemoryFilter:
    """A typed MemoryFilter tree from its scenario form (README.md): {"all": [..]}, {"any": [..]}, {"not": ..},
    or a condition {"path": [key or index, ...], "op": "gt", "value": desc, "mode": "python"}."""
    if "all" in d:
        return mpb.MemoryFilter(all=mpb.MemoryFilterList(filters=[tree_of(x) for x in d["all"]]))
    if "any" in d:
        return mpb.MemoryFilter(any=mpb.MemoryFilterList(filters=[tree_of(x) for x in d["any"]]))
    if "not" in d:
        return mpb.MemoryFilter(negate=tree_of(d["not"]))
    cond = mpb.FieldCondition(op=OPERATORS[d["op"]], mode=MODES[d.get("mode", "agentstate")], path=mpb.FieldPath(
        segments=[mpb.FieldPathSegment(key=x) if isinstance(x, str) else mpb.FieldPathSegment(index=x)
                  for x in d["path"]]))
    if "value" in d:
        to_value(from_desc(resolve(d["value"])), cond.value)
    return mpb.MemoryFilter(field=cond)


def filter_of(step: dict):
    """A step's filter: an expression map (``filter``), a typed tree (``tree``), or None."""
    if "tree" in step:
        return tree_of(step["tree"])
    return from_desc(resolve(step["filter"])) if "filter" in step else None


CONVERSATION_OPS = ("append_items", "set_compaction_policy", "pop_item", "latest", "get_context", "set_pin")


def context_desc(ctx) -> dict:
    """What a get_context step's "expect" may name (the same in every runner): per item its source and
    tokens and whether they were estimated, the totals, and each explanation entry as one string
    "<pin:ID | first-last | knowledge:I> <fate> t=<tokens>[ @<context_index>][ <summary_id>][ dup=<seq>][ mem=<hit>]",
    and the memory hits of the items, each "<path>/<key> v<version>[ scored]"."""
    def entry(e) -> str:
        which = e.WhichOneof("source")
        head = (f"pin:{e.pin_id}" if which == "pin_id" else f"knowledge:{e.knowledge_index}"
                if which == "knowledge_index" else f"{e.items.first_seq}-{e.items.last_seq}")
        out = f"{head} {cpb.Fate.Name(e.fate).removeprefix('FATE_').lower()} t={e.tokens}"
        if e.HasField("context_index"):
            out += f" @{e.context_index}"
        if e.summary_id:
            out += f" {e.summary_id}"
        if e.duplicate_of_seq:
            out += f" dup={e.duplicate_of_seq}"
        if e.HasField("memory_hit"):
            out += f" mem={hit(e.memory_hit)}"
        return out

    def hit(h) -> str:
        return f"{'/'.join(h.path)}/{h.key} v{h.version}" + (" scored" if h.HasField("score") else "")
    return {"sources": [cpb.ContextSource.Name(i.source).removeprefix("CONTEXT_SOURCE_").lower() for i in ctx.items],
            "tokens": [i.tokens for i in ctx.items], "estimated": [i.tokens_estimated for i in ctx.items],
            "total_tokens": ctx.total_tokens, "stable_prefix_items": ctx.stable_prefix_items,
            "estimated_raw_tokens": ctx.estimated_raw_tokens, "client_counted_tokens": ctx.client_counted_tokens,
            "explanation": [entry(e) for e in ctx.explanation],
            "memory_hits": [hit(i.memory_hit) for i in ctx.items if i.HasField("memory_hit")]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--address", required=True)
    ap.add_argument("--lang", default="py")
    ap.add_argument("--run", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--mode", choices=["write", "read"], required=True)
    ap.add_argument("--peers", default="")
    opts = ap.parse_args()
    r = Runner(opts.address, opts.lang, opts.run)
    out = Path(opts.dir)
    try:
        if opts.mode == "write":
            data = r.write_pass()
            (out / f"{opts.lang}.json").write_text(json.dumps(data, indent=1, sort_keys=True))
        else:
            own = json.loads((out / f"{opts.lang}.json").read_text())
            for peer in filter(None, opts.peers.split(",")):
                r.read_pass(own, json.loads((out / f"{peer}.json").read_text()))
    except (grpc.RpcError, AgentStateError, KeyError, ValueError) as e:
        r.check(False, f"runner stopped: {type(e).__name__}: {e}")
    print(f"conformance[{opts.lang}/{opts.mode}]: {r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
