"""Authentication and authorization (sidecar/api/auth.py, docs/security.md).

The matrix: every RPC of every service × (no token, wrong token, a token for another namespace, a
read-only token on a write, the right token). Every denied call has the right status code and
ErrorInfo reason, and leaves the LMDB store byte for byte as it was (all sub-databases compared
before and after); the right token is never denied. Then streams checked per message, reloading
the auth file on SIGHUP without dropping connections, the transport rules (TLS, mutual TLS, the
non-loopback refusal, socket and directory modes) and the clients' token and TLS options.
"""
from __future__ import annotations

import asyncio
import hashlib
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import lmdb
import pytest
from google.protobuf import duration_pb2, message_factory
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from agentstate import TLS, AsyncClient, Client, PermissionDenied, Unauthenticated
from agentstate.v1 import (admin_pb2, artifacts_pb2 as apb, effects_pb2 as fpb, events_pb2 as epb, memory_pb2 as mpb,
                           runs_pb2 as rpb, threads_pb2 as pb)
from agentstate.values import to_value
from sidecar import server
from sidecar.api import auth
from sidecar.storage import layout

from certs import PKI
from conftest import SidecarProcess

NS = "team-a"
OTHER = "team-b"
PROTO_MODULES = tuple(module for module, _ in server.SERVICES)  # every service the sidecar serves
AUTH_CODES = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


def all_methods():
    for module in PROTO_MODULES:
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                yield f"{service.full_name}/{method.name}", method


# ---------------------------------------------------------------- the table

def test_every_rpc_of_every_service_is_in_the_table():
    in_protos = {name for name, _ in all_methods()}
    assert set(auth.RULES) == in_protos
    served = {s for s in server.SERVICE_NAMES}
    assert {name.split("/")[0] for name in in_protos} == served


def test_each_rule_reads_a_namespace_the_request_has():
    for name, method in all_methods():
        rule = auth.RULES[name]
        fields = {f.name for f in method.input_type.fields}
        if rule.namespaces is None:
            assert rule.access == auth.ADMIN and name.startswith("agentstate.v1.AdminService/"), name
            assert "namespace" not in fields, name
        elif rule.per_message:
            assert method.client_streaming, name
        else:
            assert "namespace" in fields, name
        # a read rule is only given to calls whose names say they read
        if rule.access == auth.READ:
            assert method.name.startswith(("Get", "List", "Diff", "Watch", "Download", "Search", "Expand")), name


def test_a_missing_rule_fails_at_registration():
    from sidecar.api import service
    descriptor = pb.DESCRIPTOR.services_by_name["ThreadService"]
    saved = auth.RULES.pop("agentstate.v1.ThreadService/GetThread")
    try:
        authorizer = auth.Authorizer.__new__(auth.Authorizer)

        async def register():  # a grpc.aio server is made inside a running loop (whatever ran before)
            service.add_to_server(object.__new__(service.ThreadService), descriptor, grpc.aio.server(), authorizer)

        with pytest.raises(KeyError):
            asyncio.run(register())
    finally:
        auth.RULES["agentstate.v1.ThreadService/GetThread"] = saved


# ---------------------------------------------------------------- the auth file

def test_auth_file_holds_hashes_only(tmp_path):
    token = auth.new_token()
    assert token.startswith("ast_") and len(token) > 40
    entry = auth.entry_toml(token, "write", [NS, "x\"y"], name="agent")
    assert token not in entry
    assert hashlib.sha256(token.encode()).hexdigest() in entry
    policy = auth.parse_policy(entry)
    (digest, principal), = policy.tokens
    assert digest == hashlib.sha256(token.encode()).digest()
    assert principal == auth.Principal("agent", "write", frozenset({NS, 'x"y'}))
    with pytest.raises(auth.AuthFileError, match="plain token"):
        auth.parse_policy(f'[[token]]\ntoken = "{token}"\nrole = "read"\nnamespaces = ["a"]\n')
    for bad, match in ((entry.replace('"write"', '"root"'), "role"),
                       (entry.replace("namespaces = [", "namespaces = [] #"), "namespaces"),
                       (entry.replace("sha256 = \"", "sha256 = \"zz"), "64 hex"),
                       (entry + entry, "twice"),
                       ("[[tokens]]\n", "unknown table"),
                       ("[[token]\n", "TOML")):
        with pytest.raises(auth.AuthFileError, match=match):
            auth.parse_policy(bad)
    assert auth.parse_policy('[[token]]\nsha256 = "%s"\nrole = "admin"\nnamespaces = ["*"]\n'
                             % ("ab" * 32)).tokens[0][1].namespaces is None


def test_token_command(tmp_path):
    path = tmp_path / "auth.toml"
    out = subprocess.run([sys.executable, "-m", "sidecar", "token", "--role", "read", "--namespace", NS,
                          "--namespace", OTHER, "--name", "reader"], capture_output=True, text=True, check=True)
    token, *entry = out.stdout.splitlines()
    policy = auth.parse_policy("\n".join(entry))
    assert policy.tokens[0][0] == hashlib.sha256(token.encode()).digest()
    assert policy.tokens[0][1] == auth.Principal("reader", "read", frozenset({NS, OTHER}))
    for _ in range(2):
        out = subprocess.run([sys.executable, "-m", "sidecar", "token", "--role", "write", "--namespace", NS,
                              "--append", str(path)], capture_output=True, text=True, check=True)
        assert out.stdout.count("\n") == 1 and out.stdout.strip() not in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(auth.load_policy(str(path)).tokens) == 2


# ---------------------------------------------------------------- the matrix

class Tokens:
    def __init__(self) -> None:
        self.admin = auth.new_token()     # admin, every namespace: set-up and the admin calls
        self.writer = auth.new_token()    # write, NS
        self.reader = auth.new_token()    # read, NS
        self.other = auth.new_token()     # admin, OTHER only
        self.wrong = auth.new_token()     # not in the file

    def file_text(self) -> str:
        return "\n".join((auth.entry_toml(self.admin, "admin", ["*"], "admin"),
                          auth.entry_toml(self.writer, "write", [NS], "writer"),
                          auth.entry_toml(self.reader, "read", [NS], "reader"),
                          auth.entry_toml(self.other, "admin", [OTHER], "other")))


@pytest.fixture(scope="module")
def tokens():
    return Tokens()


@pytest.fixture(scope="module")
def secured(tmp_path_factory, tokens):
    base = tmp_path_factory.mktemp("auth")
    auth_file = base / "auth.toml"
    auth_file.write_text(tokens.file_text())
    proc = SidecarProcess(base / "data", "--auth-file", str(auth_file), "--lease-timeout", "3600",
                          "--watchdog-interval", "60")
    proc.auth_file = auth_file
    start_with_token(proc, tokens.admin)
    yield proc
    proc.stop()


def start_with_token(proc: SidecarProcess, token: str, timeout: float = 20.0) -> None:
    """Start ``proc`` and wait until it answers (health needs no token)."""
    proc.start(timeout)
    with Client(proc.address, token=token, timeout=10) as c:
        c.wait_ready(10)


def md(token: str | None):
    return None if token is None else (("authorization", f"Bearer {token}"),)


def snapshot(data_dir: Path) -> dict:
    """Every key and value of every sub-database of the store (read in another process, MVCC)."""
    env = lmdb.open(str(data_dir), readonly=True, lock=True, max_dbs=len(layout.DB_NAMES) + 8, subdir=True)
    try:
        out = {}
        for name in layout.DB_NAMES:
            db = env.open_db(name.encode(), create=False)
            with env.begin(db=db) as txn:
                out[name] = hashlib.sha256(b"".join(len(k).to_bytes(4, "big") + k + len(v).to_bytes(8, "big") + v
                                                    for k, v in txn.cursor())).hexdigest()
        return out
    finally:
        env.close()


def build_requests(w) -> dict:
    """One request (or, for client streams, the messages) per RPC, addressed to NS. Fresh ids each call."""
    u = lambda p: f"{p}-{uuid.uuid4().hex[:10]}"  # noqa: E731
    value = to_value({"k": 1})
    put = lambda tid=None, ns=NS: pb.PutCheckpointRequest(  # noqa: E731
        namespace=ns, thread_id=tid or u("t"), checkpoint_id="c1",
        channels={"n": pb.ChannelWrite(value=to_value(7))})
    lease = dict(run_id=w.run_id, lease_id=w.lease_id)
    T, R, E, A, F, M = ("agentstate.v1.ThreadService/", "agentstate.v1.RunService/", "agentstate.v1.EventService/",
                        "agentstate.v1.ArtifactService/", "agentstate.v1.EffectService/", "agentstate.v1.MemoryService/")
    return {
        T + "CreateThread": pb.CreateThreadRequest(namespace=NS, thread_id=u("t")),
        T + "GetThread": pb.GetThreadRequest(namespace=NS, thread_id=w.thread),
        T + "ListThreads": pb.ListThreadsRequest(namespace=NS),
        T + "UpdateThread": pb.UpdateThreadRequest(namespace=NS, thread_id=w.thread, set_metadata={"k": value}),
        T + "DeleteThread": pb.DeleteThreadRequest(namespace=NS, thread_id=u("gone"), allow_missing=True),
        T + "CopyThread": pb.CopyThreadRequest(namespace=NS, source_thread_id=w.thread, target_thread_id=u("copy")),
        T + "PutCheckpoint": put(),
        T + "PutWrites": pb.PutWritesRequest(namespace=NS, thread_id=w.thread, checkpoint_id="c2", writes=[
            pb.PendingWrite(task_id=u("task"), idx=0, channel="n", value=value)]),
        T + "GetCheckpoint": pb.GetCheckpointRequest(namespace=NS, thread_id=w.thread),
        T + "ListCheckpoints": pb.ListCheckpointsRequest(namespace=NS, thread_id=w.thread),
        T + "PruneCheckpoints": pb.PruneCheckpointsRequest(namespace=NS, thread_ids=[u("none")], keep_latest=1),
        T + "DeleteCheckpointsForRuns": pb.DeleteCheckpointsForRunsRequest(namespace=NS, run_ids=[u("r")]),
        T + "DiffCheckpoints": pb.DiffCheckpointsRequest(namespace=NS, thread_id=w.thread, from_checkpoint_id="c1",
                                                         to_checkpoint_id="c2"),
        T + "GetChannelHistory": pb.GetChannelHistoryRequest(namespace=NS, thread_id=w.thread, channels=["n"]),
        T + "BatchWrite": pb.BatchWriteRequest(namespace=NS, writes=[pb.BatchedWrite(put_checkpoint=put())]),
        T + "StreamWrites": [pb.StreamWritesRequest(writes=[pb.StreamedWrite(seq=1, put_checkpoint=put())])],
        T + "ResumeThread": pb.ResumeThreadRequest(namespace=NS, thread_id=w.thread, read_schema_version=1),
        "agentstate.v1.AdminService/GetStoreStats": admin_pb2.GetStoreStatsRequest(),
        "agentstate.v1.AdminService/CollectGarbage": admin_pb2.CollectGarbageRequest(),
        "agentstate.v1.AdminService/CheckIntegrity": admin_pb2.CheckIntegrityRequest(),
        "agentstate.v1.AdminService/BackupStore": admin_pb2.BackupStoreRequest(name=u("backup")),
        "agentstate.v1.AdminService/ReencryptNamespace": admin_pb2.ReencryptNamespaceRequest(namespace=NS),
        R + "CreateRun": rpb.CreateRunRequest(namespace=NS, thread_id=u("t"), create_thread=True),
        R + "GetRun": rpb.GetRunRequest(namespace=NS, run_id=w.run_id),
        R + "ListRuns": rpb.ListRunsRequest(namespace=NS, thread_id="t-run"),
        R + "ClaimRun": rpb.ClaimRunRequest(namespace=NS, thread_id=u("t"), wait_timeout=duration_pb2.Duration()),
        R + "Heartbeat": rpb.HeartbeatRequest(namespace=NS, **lease),
        R + "CompleteRun": rpb.CompleteRunRequest(namespace=NS, run_id=u("r")),
        R + "FailRun": rpb.FailRunRequest(namespace=NS, run_id=u("r"), error="x"),
        R + "CancelRun": rpb.CancelRunRequest(namespace=NS, run_id=u("r")),
        R + "ResumeRun": rpb.ResumeRunRequest(namespace=NS, run_id=u("r")),
        R + "ListBranches": rpb.ListBranchesRequest(namespace=NS, thread_id=w.thread),
        R + "PromoteBranch": rpb.PromoteBranchRequest(namespace=NS, thread_id=w.thread, branch_thread_id=u("b")),
        R + "StartStep": rpb.StartStepRequest(namespace=NS, step=rpb.StepRecord(step_id=u("s"), name="n"), **lease),
        R + "EndStep": rpb.EndStepRequest(namespace=NS, run_id=w.run_id, step_id=u("s")),
        R + "RecordStep": rpb.RecordStepRequest(namespace=NS, step=rpb.StepRecord(step_id=u("s"), name="n"),
                                                **lease),
        R + "ListSteps": rpb.ListStepsRequest(namespace=NS, run_id=w.run_id),
        R + "GetThreadUsage": rpb.GetThreadUsageRequest(namespace=NS, thread_id="t-run"),
        E + "AppendEvents": epb.AppendEventsRequest(namespace=NS, thread_id=w.thread,
                                                    events=[epb.EventInput(type="note", data=value)]),
        E + "ListEvents": epb.ListEventsRequest(namespace=NS, thread_id=w.thread),
        E + "WatchEvents": epb.WatchEventsRequest(namespace=NS, thread_id=w.thread),
        A + "UploadArtifact": [apb.UploadArtifactRequest(header=apb.UploadArtifactHeader(
            namespace=NS, thread_id=w.thread, name=u("f"))), apb.UploadArtifactRequest(data=b"data")],
        A + "DownloadArtifact": apb.DownloadArtifactRequest(namespace=NS, thread_id=w.thread, name="a.txt"),
        A + "GetArtifact": apb.GetArtifactRequest(namespace=NS, thread_id=w.thread, name="a.txt"),
        A + "ListArtifacts": apb.ListArtifactsRequest(namespace=NS, thread_id=w.thread),
        A + "SetOfficialArtifact": apb.SetOfficialArtifactRequest(namespace=NS, thread_id=w.thread, name="a.txt",
                                                                  version=1),
        F + "BeginEffect": fpb.BeginEffectRequest(namespace=NS, idempotency_key=u("k"), **lease),
        F + "CompleteEffect": fpb.CompleteEffectRequest(namespace=NS, idempotency_key=u("k"), token="x"),
        F + "FailEffect": fpb.FailEffectRequest(namespace=NS, idempotency_key=u("k"), token="x", error="e"),
        F + "GetEffect": fpb.GetEffectRequest(namespace=NS, idempotency_key=u("k")),
        F + "ListEffects": fpb.ListEffectsRequest(namespace=NS, thread_id="t-run"),
        M + "PutMemoryItem": mpb.PutMemoryItemRequest(namespace=NS, path=["users", "u1"], key=u("k"),
                                                      value=to_value({"a": 1})),
        M + "GetMemoryItem": mpb.GetMemoryItemRequest(namespace=NS, path=["users", "u1"], key="k0",
                                                      allow_missing=True),
        M + "DeleteMemoryItem": mpb.DeleteMemoryItemRequest(namespace=NS, path=["users", "u1"], key=u("gone"),
                                                            allow_missing=True),
        M + "BatchMemory": mpb.BatchMemoryRequest(namespace=NS, ops=[mpb.MemoryOp(put=mpb.PutMemoryItemRequest(
            path=["users", "u1"], key=u("b"), value=to_value({"b": 2})))]),
        M + "ListMemoryNamespaces": mpb.ListMemoryNamespacesRequest(namespace=NS),
        M + "SearchMemoryItems": mpb.SearchMemoryItemsRequest(namespace=NS, path_prefix=["users"]),
        M + "GetMemoryItemHistory": mpb.GetMemoryItemHistoryRequest(namespace=NS, path=["users", "u1"], key="k0"),
        M + "SweepExpiredMemoryItems": mpb.SweepExpiredMemoryItemsRequest(namespace=NS),
        **conversation_requests(u),
        **retention_requests(w),
        **schema_requests(u, w),
        **transfer_requests(w),
    }


def transfer_requests(w) -> dict:
    """Every TransferService call: an export of the base thread; an import whose header names NS (its data is
    no export file: the right token gets INVALID_ARGUMENT from the operation, never a denial)."""
    from agentstate.v1 import transfer_pb2 as xpb  # noqa: PLC0415
    X = "agentstate.v1.TransferService/"
    return {
        X + "ExportNamespace": xpb.ExportNamespaceRequest(namespace=NS, thread_id=w.thread),
        X + "ImportNamespace": [xpb.ImportNamespaceRequest(header=xpb.ImportHeader(namespace=NS)),
                                xpb.ImportNamespaceRequest(data=b"not an export file")],
    }


def retention_requests(w) -> dict:
    """Every RetentionService call (ApplyRetention as a real pass: a writer's call)."""
    from agentstate.v1 import retention_pb2 as tpb  # noqa: PLC0415
    X = "agentstate.v1.RetentionService/"
    return {
        X + "SetRetentionPolicy": tpb.SetRetentionPolicyRequest(namespace=NS, thread_id=w.thread,
                                                                policy=tpb.RetentionPolicy(keep_last=100)),
        X + "GetRetentionPolicy": tpb.GetRetentionPolicyRequest(namespace=NS),
        X + "ApplyRetention": tpb.ApplyRetentionRequest(namespace=NS, thread_id=w.thread),
        X + "GetUsage": tpb.GetUsageRequest(namespace=NS, thread_id=w.thread),
        X + "SetQuota": tpb.SetQuotaRequest(namespace=NS, quota=tpb.Quota(max_items=10 ** 9)),
        X + "GetQuota": tpb.GetQuotaRequest(namespace=NS, thread_id=w.thread),
    }



def schema_requests(u, w) -> dict:
    """Every SchemaService call (a fresh schema to register; the others may be refused by the operation)."""
    from agentstate.v1 import schemas_pb2 as spb  # noqa: PLC0415
    S = "agentstate.v1.SchemaService/"
    return {
        S + "RegisterSchema": spb.RegisterSchemaRequest(namespace=NS, schema=spb.Schema(
            name=u("schema"), versions=[spb.SchemaVersion(version=1)])),
        S + "GetSchema": spb.GetSchemaRequest(namespace=NS, name="none"),
        S + "ListSchemas": spb.ListSchemasRequest(namespace=NS),
        S + "MigrateThread": spb.MigrateThreadRequest(namespace=NS, thread_id=w.thread, schema="none"),
        S + "MigrateNamespace": spb.MigrateNamespaceRequest(namespace=NS, schema="none"),
    }


def conversation_requests(u) -> dict:
    """Every ConversationService call with the namespace (and a thread of its own where it takes one); most
    are refused by the operation when allowed (empty items, unknown thread), never by the checks."""
    from agentstate.v1 import conversations_pb2  # noqa: PLC0415
    out = {}
    for m in conversations_pb2.DESCRIPTOR.services_by_name["ConversationService"].methods:
        kw = {"namespace": NS}
        if "thread_id" in m.input_type.fields_by_name:
            kw["thread_id"] = u("conv")
        out[f"agentstate.v1.ConversationService/{m.name}"] = message_factory.GetMessageClass(m.input_type)(**kw)
    return out


def invoke(channel: grpc.Channel, name: str, request, token: str | None, timeout: float = 5.0):
    """Call ``name`` with ``request`` (a list of messages for a client stream); the status code and ErrorInfo
    reason (OK, "" on success; a server stream is read to its first response)."""
    method = dict(all_methods())[name]
    out_cls = message_factory.GetMessageClass(method.output_type)
    kind = {(False, False): channel.unary_unary, (False, True): channel.unary_stream,
            (True, False): channel.stream_unary, (True, True): channel.stream_stream}[
        (method.client_streaming, method.server_streaming)]
    fn = kind(f"/{name}", request_serializer=lambda m: m.SerializeToString(), response_deserializer=out_cls.FromString)
    try:
        if method.client_streaming:
            call = fn(iter(request), metadata=md(token), timeout=timeout)
        else:
            call = fn(request, metadata=md(token), timeout=timeout)
        if method.server_streaming:
            for _ in call:
                call.cancel()
                break
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.CANCELLED:
            return grpc.StatusCode.OK, ""
        return e.code(), reason_of(e)


def reason_of(e: grpc.RpcError) -> str:
    status = rpc_status.from_call(e)
    if status is None:
        return ""
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info.reason
    return ""


@pytest.fixture(scope="module")
def world(secured, tokens):
    with Client(secured.address, namespace=NS, token=tokens.admin) as c:
        thread = "t-base"
        c.put_checkpoint(thread, {"messages": ["hi"], "n": 1}, checkpoint_id="c1")
        c.put_checkpoint(thread, {"n": 2}, checkpoint_id="c2", parent_id="c1")
        created = c.runs.stub.CreateRun(rpb.CreateRunRequest(namespace=NS, thread_id="t-run", run_id="run-1",
                                                             create_thread=True, claim=True), timeout=10)
        c.events.stub.AppendEvents(epb.AppendEventsRequest(namespace=NS, thread_id=thread, events=[
            epb.EventInput(type="note", data=to_value(1))]), timeout=10)
        c.artifacts.upload(thread, "a.txt", b"hello")

    class W:
        pass
    w = W()
    w.thread, w.run_id, w.lease_id = thread, "run-1", created.lease.lease_id
    return w


CASES = ("no token", "wrong token", "other namespace", "read-only on a write", "right token")


def expected(case: str, rule: auth.Rule):
    """(code, reason) a call must get, or None: it must not be denied."""
    if case == "no token":
        return grpc.StatusCode.UNAUTHENTICATED, "AUTH_REQUIRED"
    if case == "wrong token":
        return grpc.StatusCode.UNAUTHENTICATED, "AUTH_INVALID"
    if case == "other namespace":  # an admin token of OTHER: store-wide admin calls are allowed to it
        return None if rule.namespaces is None else (grpc.StatusCode.PERMISSION_DENIED, "NAMESPACE_DENIED")
    if case == "read-only on a write":
        return None if rule.access == auth.READ else (grpc.StatusCode.PERMISSION_DENIED, "ROLE_DENIED")
    return None


def token_for(case: str, rule: auth.Rule, tokens: Tokens) -> str | None:
    return {"no token": None, "wrong token": tokens.wrong, "other namespace": tokens.other,
            "read-only on a write": tokens.reader,
            "right token": tokens.admin if rule.access == auth.ADMIN else tokens.writer}[case]


def test_matrix_every_rpc_every_credential(secured, tokens, world):
    """Every RPC × every credential case: denied with the right code and reason, nothing changed."""
    channel = grpc.insecure_channel(secured.address)
    results = {}
    denied = allowed = 0
    try:
        for name, _method in all_methods():
            rule = auth.RULES[name]
            before = snapshot(secured.data_dir)
            for case in CASES[:-1]:
                want = expected(case, rule)
                if want is None:
                    continue
                got = invoke(channel, name, build_requests(world)[name], token_for(case, rule, tokens))
                assert got == want, f"{name} with {case}: {got} != {want}"
                denied += 1
            assert snapshot(secured.data_dir) == before, f"a denied {name} changed the store"
            for case in CASES:
                if expected(case, rule) is None:
                    got = invoke(channel, name, build_requests(world)[name], token_for(case, rule, tokens))
                    assert got[0] not in AUTH_CODES, f"{name} with {case} was denied: {got}"
                    results[(name, case)] = got
                    allowed += 1
    finally:
        channel.close()
    assert denied >= 4 * 35 and allowed >= 46
    ok = [k for k, v in results.items() if v[0] == grpc.StatusCode.OK and k[1] == "right token"]
    # most of the requests are valid ones: the right token really gets through to the operation
    assert len(ok) >= 30, sorted(set(results) - set(ok))


def test_admin_token_of_another_namespace_cannot_read_this_one(secured, tokens, world):
    with Client(secured.address, namespace=NS, token=tokens.other, timeout=5) as c:
        with pytest.raises(PermissionDenied) as info:
            c.get_checkpoint(world.thread)
        assert info.value.reason == "NAMESPACE_DENIED" and info.value.metadata["namespace"] == NS
    with Client(secured.address, namespace=NS, token=tokens.writer, timeout=5) as c:
        with pytest.raises(PermissionDenied) as info:
            c.store_stats()
        assert info.value.reason == "ROLE_DENIED"
        assert (info.value.metadata["role"], info.value.metadata["granted"]) == ("admin", "write")


def test_default_namespace_is_a_namespace(secured, tokens):
    """An empty namespace means "default": a token for NS may not use it."""
    channel = grpc.insecure_channel(secured.address)
    try:
        got = invoke(channel, "agentstate.v1.ThreadService/ListThreads", pb.ListThreadsRequest(), tokens.writer)
        assert got == (grpc.StatusCode.PERMISSION_DENIED, "NAMESPACE_DENIED")
    finally:
        channel.close()


def test_malformed_authorization_header(secured, tokens):
    channel = grpc.insecure_channel(secured.address)
    stub = channel.unary_unary("/agentstate.v1.ThreadService/ListThreads",
                               request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=pb.ListThreadsResponse.FromString)
    try:
        for value in (f"Basic {tokens.writer}", "Bearer", "Bearer ", tokens.writer, f"Bearer {tokens.writer}x"):
            with pytest.raises(grpc.RpcError) as info:
                stub(pb.ListThreadsRequest(namespace=NS), metadata=(("authorization", value),), timeout=5)
            assert (info.value.code(), reason_of(info.value)) == (grpc.StatusCode.UNAUTHENTICATED, "AUTH_INVALID")
        assert stub(pb.ListThreadsRequest(namespace=NS), metadata=(("authorization", f"bearer {tokens.writer}"),),
                    timeout=5) is not None
    finally:
        channel.close()


# ---------------------------------------------------------------- streams: every message checked

def test_stream_writes_checks_each_message(secured, tokens):
    tid_a, tid_b = f"s-{uuid.uuid4().hex[:8]}", f"s-{uuid.uuid4().hex[:8]}"
    put = lambda ns, tid, cid: pb.PutCheckpointRequest(namespace=ns, thread_id=tid, checkpoint_id=cid,  # noqa: E731
                                                      channels={"n": pb.ChannelWrite(value=to_value(1))})
    messages = [pb.StreamWritesRequest(writes=[pb.StreamedWrite(seq=1, put_checkpoint=put(NS, tid_a, "c1"))]),
                pb.StreamWritesRequest(writes=[pb.StreamedWrite(seq=2, put_checkpoint=put(NS, tid_a, "c2")),
                                               pb.StreamedWrite(seq=3, put_checkpoint=put(OTHER, tid_b, "c1"))]),
                pb.StreamWritesRequest(writes=[pb.StreamedWrite(seq=4, put_checkpoint=put(NS, tid_a, "c3"))])]
    channel = grpc.insecure_channel(secured.address)

    def slow():
        yield messages[0]
        time.sleep(0.5)  # the first is acknowledged before the denied one arrives
        yield from messages[1:]
    acks = []
    try:
        call = channel.stream_stream("/agentstate.v1.ThreadService/StreamWrites",
                                     request_serializer=lambda m: m.SerializeToString(),
                                     response_deserializer=pb.StreamWritesResponse.FromString)(
            slow(), metadata=md(tokens.writer), timeout=10)
        with pytest.raises(grpc.RpcError) as info:
            for resp in call:
                acks.extend(a.seq for a in resp.acks if a.WhichOneof("result") == "put_checkpoint")
        assert (info.value.code(), reason_of(info.value)) == (grpc.StatusCode.PERMISSION_DENIED, "NAMESPACE_DENIED")
    finally:
        channel.close()
    assert acks == [1]
    with Client(secured.address, namespace=NS, token=tokens.admin) as c:
        assert [cp.checkpoint_id for cp in c.list_checkpoints(tid_a)] == ["c1"]  # nothing of the denied message
    with Client(secured.address, namespace=OTHER, token=tokens.admin) as c:
        assert list(c.list_checkpoints(tid_b)) == []


def test_upload_checks_its_header(secured, tokens, world):
    with Client(secured.address, namespace=OTHER, token=tokens.writer, timeout=5) as c:
        with pytest.raises(PermissionDenied) as info:
            c.artifacts.upload(world.thread, "x.bin", b"x" * 1000)
        assert info.value.reason == "NAMESPACE_DENIED" and info.value.field == "header.namespace"
    with Client(secured.address, namespace=NS, token=tokens.reader, timeout=5) as c:
        with pytest.raises(PermissionDenied) as info:
            c.artifacts.upload(world.thread, "x.bin", b"x")
        assert info.value.reason == "ROLE_DENIED"


def test_batch_write_checks_every_request(secured, tokens):
    """A token for NS cannot hide a write to OTHER inside a batch addressed to NS."""
    channel = grpc.insecure_channel(secured.address)
    try:
        req = pb.BatchWriteRequest(namespace=NS, writes=[pb.BatchedWrite(put_checkpoint=pb.PutCheckpointRequest(
            namespace=OTHER, thread_id="t-x", channels={"n": pb.ChannelWrite(value=to_value(1))}))])
        before = snapshot(secured.data_dir)
        got = invoke(channel, "agentstate.v1.ThreadService/BatchWrite", req, tokens.writer)
        assert got == (grpc.StatusCode.PERMISSION_DENIED, "NAMESPACE_DENIED")
        assert snapshot(secured.data_dir) == before
    finally:
        channel.close()


# ---------------------------------------------------------------- SIGHUP

def test_sighup_reloads_without_dropping_connections(tmp_path):
    keep, revoke, new = auth.new_token(), auth.new_token(), auth.new_token()
    auth_file = tmp_path / "auth.toml"
    auth_file.write_text(auth.entry_toml(keep, "write", [NS]) + auth.entry_toml(revoke, "write", [NS]))
    proc = SidecarProcess(tmp_path / "data", "--auth-file", str(auth_file))
    start_with_token(proc, keep)
    try:
        with Client(proc.address, namespace=NS, token=keep) as k, \
                Client(proc.address, namespace=NS, token=revoke, timeout=5) as r:
            k.put_checkpoint("t", {"n": 1})
            r.put_checkpoint("t2", {"n": 1})
            kept_stream = k.events.watch("t", after=0)
            revoked_stream = r.events.watch("t2", after=0)
            k.events.stub.AppendEvents(epb.AppendEventsRequest(namespace=NS, thread_id="t", events=[
                epb.EventInput(type="before")]))
            r.events.stub.AppendEvents(epb.AppendEventsRequest(namespace=NS, thread_id="t2", events=[
                epb.EventInput(type="before")]))
            assert next(kept_stream).type == "before" and next(revoked_stream).type == "before"

            # a broken file is refused: the old one stays in force
            auth_file.write_text("[[token]\n")
            proc.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: "auth file not reloaded" in proc.log())
            r.get_thread("t2")

            auth_file.write_text(auth.entry_toml(keep, "write", [NS]) + auth.entry_toml(new, "read", [NS]))
            proc.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: "auth file reloaded: 2 tokens" in proc.log())
            with pytest.raises(Unauthenticated) as info:
                r.get_thread("t2")
            assert info.value.reason == "AUTH_INVALID"
            with Client(proc.address, namespace=NS, token=new) as n:
                assert n.get_thread("t").thread_id == "t"
            # the open streams: the kept one goes on, on the same connection; the revoked one ends
            k.events.stub.AppendEvents(epb.AppendEventsRequest(namespace=NS, thread_id="t", events=[
                epb.EventInput(type="after")]))
            assert next(kept_stream).type == "after"
            with Client(proc.address, namespace=NS, token=keep) as k2:
                k2.events.stub.AppendEvents(epb.AppendEventsRequest(namespace=NS, thread_id="t2", events=[
                    epb.EventInput(type="after")]))
            with pytest.raises(Unauthenticated):
                next(revoked_stream)
            assert proc.proc.poll() is None
    finally:
        proc.stop()


def wait_for(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


# ---------------------------------------------------------------- transport

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_fails(tmp_path, *args) -> str:
    out = subprocess.run([sys.executable, "-m", "sidecar", "serve", "--data-dir", str(tmp_path / "data"), *args],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, out
    return out.stderr


def test_non_loopback_tcp_needs_tls_and_credentials(tmp_path):
    pki = PKI(tmp_path / "pki")
    auth_file = tmp_path / "auth.toml"
    auth_file.write_text(auth.entry_toml(auth.new_token(), "read", [NS]))
    err = serve_fails(tmp_path, "--listen", "0.0.0.0:0")
    assert "not loopback" in err and "TLS" in err and "credentials" in err and "--insecure" in err
    err = serve_fails(tmp_path, "--listen", "0.0.0.0:0", "--auth-file", str(auth_file))
    assert "TLS" in err and "credentials" not in err
    err = serve_fails(tmp_path, "--listen", "[::]:0", "--tls-cert", str(pki.server_cert),
                      "--tls-key", str(pki.server_key))
    assert "credentials" in err
    assert "go together" in serve_fails(tmp_path, "--tls-cert", str(pki.server_cert))
    assert "plain token" in serve_fails(tmp_path, "--listen", "127.0.0.1:0", "--auth-file", str(
        _write(tmp_path / "bad.toml", '[[token]]\ntoken = "x"\nrole = "read"\nnamespaces = ["a"]\n')))
    assert not (tmp_path / "data" / "data.mdb").exists()  # refused before the store was opened
    for listen in ("127.0.0.1", "[::1]", "localhost"):
        assert server.is_loopback(f"{listen}:7421")
    for listen in ("0.0.0.0", "[::]", "", "10.0.0.1", "sidecar.internal"):
        assert not server.is_loopback(f"{listen}:7421")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_insecure_flag_allows_it(tmp_path):
    port = free_port()
    proc = SidecarProcess(tmp_path / "data", "--listen", f"0.0.0.0:{port}", "--insecure")
    proc.start()
    try:
        with Client(f"127.0.0.1:{port}", timeout=5) as c:
            assert c.store_stats().threads == 0
    finally:
        proc.stop()


def test_socket_and_data_dir_modes(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    proc = SidecarProcess(data)
    proc.start()
    try:
        assert stat.S_IMODE(proc.socket.stat().st_mode) == 0o600
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def tls_sidecar(tmp_path_factory, tokens):
    base = tmp_path_factory.mktemp("tls")
    pki = PKI(base / "pki")
    pki.client("agent-m")
    pki.client("stranger")
    auth_file = base / "auth.toml"
    auth_file.write_text(auth.entry_toml(tokens.writer, "write", [NS]) +
                         f'\n[[client_cert]]\nsubject = "O=Agent State Tests,CN=agent-m"\nrole = "read"\n'
                         f'namespaces = ["{NS}"]\n')
    port = free_port()
    proc = SidecarProcess(base / "data", "--listen", f"127.0.0.1:{port}", "--auth-file", str(auth_file),
                          "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
                          "--tls-client-ca", str(pki.ca))
    start_with_token(proc, tokens.writer)
    proc.tcp = f"127.0.0.1:{port}"
    proc.pki = pki
    yield proc
    proc.stop()


def _tls(pki: PKI, cn: str | None = None, **kw) -> TLS:
    if cn is None:
        return TLS(root_certificates=pki.ca.read_bytes(), **kw)
    return TLS(root_certificates=pki.ca.read_bytes(), certificate_chain=(pki.dir / f"{cn}.pem").read_bytes(),
               private_key=(pki.dir / f"{cn}.key").read_bytes(), **kw)


def test_mutual_tls_maps_the_subject(tls_sidecar, tokens):
    pki = tls_sidecar.pki
    with Client(tls_sidecar.tcp, namespace=NS, tls=_tls(pki, "agent-m"), timeout=5) as c:
        assert list(c.list_threads()) is not None  # read: allowed by the certificate's entry
        with pytest.raises(PermissionDenied) as info:
            c.put_checkpoint("t-m", {"n": 1})
        assert info.value.reason == "ROLE_DENIED"
    with Client(tls_sidecar.tcp, namespace=OTHER, tls=_tls(pki, "agent-m"), timeout=5) as c:
        with pytest.raises(PermissionDenied) as info:
            list(c.list_threads())
        assert info.value.reason == "NAMESPACE_DENIED"
    with Client(tls_sidecar.tcp, namespace=NS, tls=_tls(pki, "stranger"), timeout=5) as c:
        with pytest.raises(Unauthenticated) as info:
            list(c.list_threads())
        assert info.value.reason == "AUTH_INVALID" and "O=Agent State Tests,CN=stranger" in str(info.value)
    # a token with a certificate: the token decides (write)
    with Client(tls_sidecar.tcp, namespace=NS, tls=_tls(pki, "agent-m"), token=tokens.writer, timeout=5) as c:
        assert c.put_checkpoint("t-m", {"n": 1}).checkpoint.checkpoint_id


def test_tls_is_required_on_the_tls_port(tls_sidecar, tokens):
    from agentstate import NO_RETRY
    with Client(tls_sidecar.tcp, namespace=NS, timeout=2, retry=NO_RETRY, wait_for_ready=False) as c:
        with pytest.raises(Exception) as info:
            list(c.list_threads())
        assert getattr(info.value, "code", None) == grpc.StatusCode.UNAVAILABLE
    # without a client certificate the handshake fails (mutual TLS)
    with Client(tls_sidecar.tcp, namespace=NS, tls=_tls(tls_sidecar.pki), token=tokens.writer, timeout=2,
                retry=NO_RETRY, wait_for_ready=False) as c:
        with pytest.raises(Exception) as info:
            list(c.list_threads())
        assert getattr(info.value, "code", None) == grpc.StatusCode.UNAVAILABLE
    # the unix socket still answers, and still wants the token
    with Client(tls_sidecar.address, namespace=NS, token=tokens.writer, timeout=5) as c:
        assert c.put_checkpoint("t-u", {"n": 1})
    with Client(tls_sidecar.address, namespace=NS, timeout=5) as c:
        with pytest.raises(Unauthenticated):
            c.get_thread("t-u")


# ---------------------------------------------------------------- the clients' options

@pytest.fixture(scope="module")
def tls_token_sidecar(tmp_path_factory, tokens):
    """TLS (server certificate only) and tokens, on loopback TCP."""
    base = tmp_path_factory.mktemp("tlstok")
    pki = PKI(base / "pki")
    auth_file = base / "auth.toml"
    auth_file.write_text(auth.entry_toml(tokens.writer, "write", [NS]))
    port = free_port()
    proc = SidecarProcess(base / "data", "--listen", f"127.0.0.1:{port}", "--auth-file", str(auth_file),
                          "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key))
    start_with_token(proc, tokens.writer)
    proc.tcp, proc.pki, proc.port = f"127.0.0.1:{port}", pki, port
    yield proc
    proc.stop()


def test_sync_client_token_and_tls(tls_token_sidecar, tokens):
    s = tls_token_sidecar
    with Client(s.tcp, namespace=NS, token=tokens.writer, tls=_tls(s.pki)) as c:
        c.put_checkpoint("t-sync", {"messages": ["a"]})
        assert c.get_values("t-sync") == {"messages": ["a"]}
    with Client(f"localhost:{s.port}", namespace=NS, token=tokens.writer, tls=_tls(s.pki)) as c:
        assert c.get_values("t-sync") == {"messages": ["a"]}  # the certificate names localhost too
    with Client(s.tcp, namespace=NS, tls=_tls(s.pki), timeout=5) as c:
        with pytest.raises(Unauthenticated):
            c.get_values("t-sync")
    with Client(s.address, namespace=NS, token=tokens.writer) as c:  # unix socket: local credentials
        assert c.get_values("t-sync") == {"messages": ["a"]}
    with pytest.raises(ValueError, match="only over TLS or a local connection"):
        Client("sidecar.internal:7421", token=tokens.writer)


def test_async_client_token_and_tls(tls_token_sidecar, tokens):
    s = tls_token_sidecar

    async def main():
        async with AsyncClient(s.tcp, namespace=NS, token=tokens.writer, tls=_tls(s.pki)) as c:
            await c.put_checkpoint("t-aio", {"n": 1})
            assert (await c.get_values("t-aio")) == {"n": 1}
            async with c.write_stream() as ws:  # a stream carries the token too
                fut = await ws.put_checkpoint("t-aio-s", {"n": 2})
                await ws.flush()
                assert (await fut).checkpoint.checkpoint_id
        async with AsyncClient(s.address, namespace=OTHER, token=tokens.writer, timeout=5) as c:
            with pytest.raises(PermissionDenied):
                await c.get_values("t-aio")
    asyncio.run(main())


def test_langgraph_savers_pass_token_and_tls(tls_token_sidecar, tokens):
    from langgraph.checkpoint.base import empty_checkpoint

    from agentstate.langgraph import AsyncSidecarSaver, SidecarSaver
    s = tls_token_sidecar
    config = {"configurable": {"thread_id": "lg-1", "checkpoint_ns": ""}}
    saver = SidecarSaver(s.tcp, namespace=NS, token=tokens.writer, tls=_tls(s.pki))
    try:
        cp = empty_checkpoint()
        saver.put(config, cp, {"source": "input", "step": 0}, {})
        assert saver.get_tuple(config).checkpoint["id"] == cp["id"]
    finally:
        saver.close()

    async def main():
        asaver = AsyncSidecarSaver(s.tcp, namespace=NS, token=tokens.writer, tls=_tls(s.pki))
        try:
            assert (await asaver.aget_tuple(config)).checkpoint["id"] == cp["id"]
        finally:
            await asaver.aclose()
    asyncio.run(main())
    bad = SidecarSaver(s.address, namespace=NS, token=auth.new_token(), timeout=3)
    try:
        with pytest.raises(Unauthenticated):
            bad.get_tuple(config)
    finally:
        bad.close()


def test_health_needs_no_token(secured):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    channel = grpc.insecure_channel(secured.address)
    try:
        resp = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        channel.close()


def test_dockerfile_follows_the_transport_rules():
    """The image's default command passes the non-loopback check only because of its TLS and auth flags."""
    import json
    import re
    from sidecar import cli
    text = (Path(__file__).resolve().parent.parent / "Dockerfile").read_text().replace("\\\n", "")
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", text, re.M).group(1))
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", text, re.M).group(1))
    assert entry[:2] == ["sidecar", "serve"] and "0.0.0.0:7421" in cmd and "--insecure" not in cmd
    seen = {}
    real = cli.serve

    async def capture(config):  # the parsed configuration, not a server
        seen["config"] = config
    cli.serve = capture
    try:
        cli.main(entry[1:] + cmd)
    finally:
        cli.serve = real
    config = seen["config"]
    server.check_transport(config)
    assert config.auth_file and config.tls_cert and config.tls_key
    for drop in ("auth_file", "tls_cert"):
        weaker = server.Config(**{**config.__dict__, drop: None, **({"tls_key": None} if drop == "tls_cert" else {})})
        with pytest.raises(server.ConfigError):
            server.check_transport(weaker)


def test_mutual_tls_without_an_auth_file(tmp_path):
    """--tls-client-ca alone: every certificate the CA signed may do everything; none, nothing."""
    pki = PKI(tmp_path / "pki")
    pki.client("ops")
    port = free_port()
    proc = SidecarProcess(tmp_path / "data", "--listen", f"127.0.0.1:{port}", "--tls-cert", str(pki.server_cert),
                          "--tls-key", str(pki.server_key), "--tls-client-ca", str(pki.ca))
    proc.start()
    try:
        with Client(f"127.0.0.1:{port}", namespace=OTHER, tls=_tls(pki, "ops"), timeout=5) as c:
            c.put_checkpoint("t", {"n": 1})
            assert c.store_stats().threads == 1  # admin too
        with Client(proc.address, namespace=OTHER, timeout=5) as c:  # the unix socket: no certificate there
            with pytest.raises(Unauthenticated) as info:
                c.get_values("t")
            assert info.value.reason == "AUTH_REQUIRED"
    finally:
        proc.stop()


def test_a_world_writable_auth_file_is_warned_about(tmp_path, tokens):
    auth_file = tmp_path / "auth.toml"
    auth_file.write_text(auth.entry_toml(tokens.writer, "write", [NS]))
    auth_file.chmod(0o666)
    proc = SidecarProcess(tmp_path / "data", "--auth-file", str(auth_file))
    start_with_token(proc, tokens.writer)
    try:
        assert "is writable by other users" in proc.log()
    finally:
        proc.stop()


def test_a_reader_may_dry_run_retention_only(secured, tokens, world):
    with Client(secured.address, namespace=NS, token=tokens.reader, timeout=5) as c:
        c.retention.apply(world.thread, dry_run=True)
        c.retention.usage(world.thread)
        with pytest.raises(PermissionDenied) as info:
            c.retention.apply(world.thread)
        assert info.value.reason == "ROLE_DENIED"
        with pytest.raises(PermissionDenied):
            c.retention.set_policy(world.thread, keep_last=1)


def test_export_and_import_need_an_admin_of_the_namespace(secured, tokens, world, tmp_path):
    """TransferService: a writer of NS is refused both calls (ROLE_DENIED), an admin of OTHER is refused NS
    (NAMESPACE_DENIED: an import checks the namespace its header names); `sidecar export|import --address
    --token` with the admin token moves the namespace, and nothing denied changed the store."""
    channel = grpc.insecure_channel(secured.address)
    try:
        before = snapshot(secured.data_dir)
        for name, request in transfer_requests(world).items():
            assert invoke(channel, name, request, tokens.writer) == (grpc.StatusCode.PERMISSION_DENIED,
                                                                     "ROLE_DENIED"), name
            assert invoke(channel, name, request, tokens.other) == (grpc.StatusCode.PERMISSION_DENIED,
                                                                    "NAMESPACE_DENIED"), name
        assert snapshot(secured.data_dir) == before
    finally:
        channel.close()
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    f = tmp_path / "ns.asx"

    def cli(*args, token):
        return subprocess.run([sys.executable, "-m", "sidecar", *args, "--address", secured.address, "--token", token],
                              capture_output=True, text=True, timeout=120)
    out = cli("export", "--namespace", NS, "--to", str(f), token=tokens.writer)
    assert out.returncode == 2 and "ROLE_DENIED" in out.stderr and not f.exists()
    out = cli("export", "--namespace", NS, "--thread", world.thread, "--to", str(f), token=tokens.admin)
    assert out.returncode == 0, out.stderr
    out = cli("import", "--from", str(f), "--namespace", OTHER, token=tokens.writer)
    assert out.returncode == 2 and "ROLE_DENIED" in out.stderr
    out = cli("import", "--from", str(f), "--namespace", OTHER, token=tokens.other)
    assert out.returncode == 0 and "import done" in out.stdout, out.stderr
    with Client(secured.address, namespace=OTHER, token=tokens.other) as c:
        assert [x.checkpoint_id for x in c.list_checkpoints(world.thread)] == ["c2", "c1"]
