"""schemas: the SchemaService facet (``client.schemas``), migration step builders, and client-side migrations.

Declared migrations (the sidecar applies them to structured values)::

    from agentstate import schemas as s
    c.schemas.register("agent", [
        [],                                              # version 1
        [s.rename("notes", "memo"), s.add(["config", "retries"], 3)],        # 1 -> 2
        [s.map_items("messages", s.convert("tokens", "int"))],               # 2 -> 3
    ], min_readable_version=1, failure_policy="degrade")
    c.put_checkpoint("t1", values, schema="agent", schema_version=1)
    cp = c.get_checkpoint("t1", read_schema_version=3)      # migrated on read; cp.migration says how

A path is a channel name, or a list of keys from the channel into its maps (``["config", "retries"]``).

Client-side migrations, for what the sidecar cannot read (opaque values such as a framework's own
serialisation): one function per version step, registered with a decorator::

    migrations = s.Migrations("agent")

    @migrations.step(1)                 # turns a version-1 state into a version-2 one
    def _(values: dict) -> dict:
        values["memo"] = values.pop("notes", "")
        return values

    values = migrations.upgrade(values, from_version=1, to_version=2)

The LangGraph savers take ``schema=``, ``schema_version=`` and ``migrations=`` and run them on every
checkpoint they load (agentstate.langgraph), so a graph whose state changed can resume old threads.
"""
from __future__ import annotations

from typing import Any, AsyncIterator, Callable, Iterable, Iterator, Sequence

from .errors import from_rpc_error
from ._facet import AsyncFacet, Call, SyncFacet, listing, pages, unary
from .values import encode_into
from .v1 import schemas_pb2 as spb, schemas_pb2_grpc

POLICIES = {"fail": spb.FAILURE_POLICY_FAIL, "degrade": spb.FAILURE_POLICY_DEGRADE,
            "new_run": spb.FAILURE_POLICY_NEW_RUN}
TYPES = {"string": spb.VALUE_TYPE_STRING, "int": spb.VALUE_TYPE_INT, "float": spb.VALUE_TYPE_FLOAT,
         "bool": spb.VALUE_TYPE_BOOL, "list": spb.VALUE_TYPE_LIST}
#: MigrationStatus of a read (Checkpoint.migration)
NOT_ASKED = spb.MIGRATION_STATUS_UNSPECIFIED
CURRENT = spb.MIGRATION_STATUS_CURRENT
MIGRATED = spb.MIGRATION_STATUS_MIGRATED
DEGRADED = spb.MIGRATION_STATUS_DEGRADED
NEW_RUN = spb.MIGRATION_STATUS_NEW_RUN
UNREGISTERED = spb.MIGRATION_STATUS_UNREGISTERED



def _path(path) -> list[str]:
    return [path] if isinstance(path, str) else list(path)


# ------------------------------------------------------------------ step builders

def rename(path, to: str) -> spb.MigrationStep:
    return spb.MigrationStep(rename=spb.RenameField(path=_path(path), to=to))


def drop(path) -> spb.MigrationStep:
    return spb.MigrationStep(drop=spb.DropField(path=_path(path)))


def add(path, default: Any) -> spb.MigrationStep:
    step = spb.MigrationStep(add=spb.AddField(path=_path(path)))
    encode_into(default, step.add.default, "default")
    return step


def nest(fields: Iterable[str], into: str, path=()) -> spb.MigrationStep:
    return spb.MigrationStep(nest=spb.NestFields(path=_path(path), fields=list(fields), into=into))


def unnest(from_: str, fields: Iterable[str] = (), path=()) -> spb.MigrationStep:
    step = spb.MigrationStep(unnest=spb.UnnestFields(path=_path(path), fields=list(fields)))
    setattr(step.unnest, "from", from_)
    return step


def convert(path, to: str) -> spb.MigrationStep:
    return spb.MigrationStep(convert=spb.ConvertField(path=_path(path), to=TYPES[to]))


def map_items(path, *steps: spb.MigrationStep) -> spb.MigrationStep:
    return spb.MigrationStep(map_items=spb.MapItems(path=_path(path), steps=list(steps)))


def schema_message(name: str, versions: Sequence[Sequence[spb.MigrationStep]], *, min_readable_version: int = 0,
                   failure_policy: str = "fail", descriptions: Sequence[str] = ()) -> spb.Schema:
    """A Schema: ``versions[k]`` holds the steps from version k to k+1 (``versions[0]``, version 1, none)."""
    out = spb.Schema(name=name, min_readable_version=min_readable_version, failure_policy=POLICIES[failure_policy])
    for i, steps in enumerate(versions):
        out.versions.add(version=i + 1, steps=list(steps),
                         description=descriptions[i] if i < len(descriptions) else "")
    return out


# ------------------------------------------------------------------ the facet

class SchemaCalls:
    """The SchemaService calls, written once for :class:`Schemas` and :class:`AsyncSchemas`."""

    def __init__(self, client) -> None:
        super().__init__(client)
        self.stub = schemas_pb2_grpc.SchemaServiceStub(client.channel)

    @unary
    def register(self, name: str, versions: Sequence[Sequence[spb.MigrationStep]], *,
                 min_readable_version: int = 0, failure_policy: str = "fail", descriptions: Sequence[str] = (),
                 etag: str = "", request_id: str = "", timeout: float | None = None) -> spb.RegisterSchemaResponse:
        """Create or update a schema (versions are append-only; see schemas.proto)."""
        req = spb.RegisterSchemaRequest(namespace=self.client.namespace, etag=etag, request_id=request_id,
                                        schema=schema_message(name, versions, min_readable_version=min_readable_version,
                                                              failure_policy=failure_policy,
                                                              descriptions=descriptions))
        return (yield Call(self.stub.RegisterSchema, req, timeout))

    @unary
    def get(self, name: str, *, timeout: float | None = None) -> spb.Schema:
        req = spb.GetSchemaRequest(namespace=self.client.namespace, name=name)
        return (yield Call(self.stub.GetSchema, req, timeout)).schema

    @listing
    def list(self, *, page_size: int = 0, timeout: float | None = None):
        return pages(self.stub.ListSchemas, lambda token: spb.ListSchemasRequest(
            namespace=self.client.namespace, page_size=page_size, page_token=token), "schemas", timeout)

    @unary
    def resume(self, thread_id: str, read_schema_version: int, *, checkpoint_ns: str = "", claim: bool = True,
               timeout: float | None = None, request_id: str = "", include_pending_writes: bool = False,
               **run_options):
        """ThreadService.ResumeThread: the latest checkpoint of a thread read at ``read_schema_version``, and,
        when the schema's NEW_RUN policy fell back to an older checkpoint (``migration == NEW_RUN``), the run
        the server created from it in the same transaction, linked to the old chain (its metadata:
        ``new_run_from`` the checkpoint that did not migrate, ``schema``, ``schema_version``, ``reason``);
        ``(checkpoint, CreateRunResponse or None)``. ``run_options`` are ``client.runs.create``'s (input,
        metadata, strategy, run_id, lease_timeout, on_lease_expired, max_attempts, timeout_seconds, budget,
        branch_thread_id, create_thread). Sent like the client's other calls (its deadline; a request id
        filled in unless given, so a retry answers the first response); ``AsyncClient``: a coroutine."""
        from .v1 import threads_pb2 as tpb  # noqa: PLC0415

        req = tpb.ResumeThreadRequest(namespace=self.client.namespace, thread_id=thread_id,
                                      checkpoint_ns=checkpoint_ns, read_schema_version=read_schema_version,
                                      run=_run_options(claim=claim, **run_options),
                                      include_pending_writes=include_pending_writes, request_id=request_id)
        resp = yield Call(self.client.threads.ResumeThread, req, timeout)
        return resp.checkpoint, (resp.run if resp.HasField("run") else None)


class Schemas(SchemaCalls, SyncFacet):
    """SchemaService calls (``client.schemas``)."""

    def migrate_thread(self, thread_id: str, schema: str, *, target_version: int = 0, batch_size: int = 0,
                       timeout: float | None = None) -> Iterator[spb.MigrationProgress]:
        """Rewrite a thread's checkpoints, then its conversation items, to ``target_version`` (0: the latest);
        yields the progress after each batch, the last one final. Calling again after an interruption finishes
        the rest."""
        yield from self._stream(self.stub.MigrateThread,
                                _migrate_thread_request(self.client, thread_id, schema, target_version, batch_size),
                                timeout)

    def migrate_namespace(self, schema: str, *, target_version: int = 0, batch_size: int = 0,
                          skip_memory: bool = False, timeout: float | None = None) -> Iterator[spb.MigrationProgress]:
        """:meth:`migrate_thread` for every thread of the namespace, then its memory items (unless
        ``skip_memory``)."""
        yield from self._stream(self.stub.MigrateNamespace,
                                _migrate_namespace_request(self.client, schema, target_version, batch_size,
                                                           skip_memory), timeout)

    def _stream(self, method, req, timeout):
        import grpc  # noqa: PLC0415

        call = method(req, timeout=timeout)
        try:
            for resp in call:
                yield resp.progress
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        finally:
            call.cancel()


def _migrate_thread_request(client, thread_id: str, schema: str, target_version: int,
                            batch_size: int) -> spb.MigrateThreadRequest:
    return spb.MigrateThreadRequest(namespace=client.namespace, thread_id=thread_id, schema=schema,
                                    target_version=target_version, batch_size=batch_size)


def _migrate_namespace_request(client, schema: str, target_version: int, batch_size: int,
                               skip_memory: bool) -> spb.MigrateNamespaceRequest:
    return spb.MigrateNamespaceRequest(namespace=client.namespace, schema=schema, target_version=target_version,
                                       batch_size=batch_size, skip_memory=skip_memory)


def _run_options(*, input: Any = None, metadata=None, strategy: str = "reject", run_id: str = "",  # noqa: A002
                 claim: bool = True, create_thread: bool = False, lease_timeout: float | None = None,
                 on_lease_expired: str = "requeue", max_attempts: int = 0, timeout_seconds: float | None = None,
                 budget=None, branch_thread_id: str = ""):
    """The CreateRunRequest of ResumeThread's run (the options of ``client.runs.create``)."""
    from ._requests import fill_map  # noqa: PLC0415
    from .run_records import ON_LEASE_EXPIRED, STRATEGIES, counters, duration  # noqa: PLC0415
    from .v1 import runs_pb2 as rpb  # noqa: PLC0415

    req = rpb.CreateRunRequest(run_id=run_id, multitask_strategy=STRATEGIES[strategy], claim=claim,
                               create_thread=create_thread, on_lease_expired=ON_LEASE_EXPIRED[on_lease_expired],
                               max_attempts=max_attempts, budget=counters(budget), branch_thread_id=branch_thread_id)
    if input is not None:
        encode_into(input, req.input, "input")
    fill_map(req.metadata, metadata)
    if lease_timeout is not None:
        req.lease_timeout.CopyFrom(duration(lease_timeout))
    if timeout_seconds is not None:
        req.timeout.CopyFrom(duration(timeout_seconds))
    return req


class AsyncSchemas(SchemaCalls, AsyncFacet):
    """SchemaService calls of the asyncio client (``async_client.schemas``); the eager migrations are async
    iterators of the progress (``async for p in c.schemas.migrate_thread(...)``)."""

    def migrate_thread(self, thread_id: str, schema: str, *, target_version: int = 0, batch_size: int = 0,
                       timeout: float | None = None) -> AsyncIterator[spb.MigrationProgress]:
        """:meth:`Schemas.migrate_thread`, as an async iterator."""
        return self._stream(self.stub.MigrateThread,
                            _migrate_thread_request(self.client, thread_id, schema, target_version, batch_size),
                            timeout)

    def migrate_namespace(self, schema: str, *, target_version: int = 0, batch_size: int = 0,
                          skip_memory: bool = False,
                          timeout: float | None = None) -> AsyncIterator[spb.MigrationProgress]:
        """:meth:`Schemas.migrate_namespace`, as an async iterator."""
        return self._stream(self.stub.MigrateNamespace,
                            _migrate_namespace_request(self.client, schema, target_version, batch_size,
                                                       skip_memory), timeout)

    async def _stream(self, method, req, timeout):
        import grpc  # noqa: PLC0415

        call = method(req, timeout=timeout)
        try:
            async for resp in call:
                yield resp.progress
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        finally:
            call.cancel()


# ------------------------------------------------------------------ client-side migrations

class MigrationError(Exception):
    """A client-side migration is missing for a step, or a step function failed."""

    def __init__(self, schema: str, from_version: int, to_version: int, message: str) -> None:
        super().__init__(f"schema {schema!r} from version {from_version} to {to_version}: {message}")
        self.schema, self.from_version, self.to_version = schema, from_version, to_version


class Migrations:
    """Client-side migrations of one schema: ``@migrations.step(n)`` registers the function that turns the
    values (a dict of channel -> value, decoded however the caller decodes them) of version ``n`` into those
    of version ``n + 1``; :meth:`upgrade` runs the steps between two versions in order."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._steps: dict[int, Callable[[dict], dict]] = {}

    def step(self, from_version: int) -> Callable[[Callable[[dict], dict]], Callable[[dict], dict]]:
        if from_version < 1:
            raise ValueError("versions start at 1")

        def register(fn: Callable[[dict], dict]) -> Callable[[dict], dict]:
            if from_version in self._steps:
                raise ValueError(f"schema {self.schema!r}: a step from version {from_version} is registered already")
            self._steps[from_version] = fn
            return fn

        return register

    @property
    def latest(self) -> int:
        """The newest version the registered steps lead to (1 with none)."""
        return max(self._steps, default=0) + 1

    def upgrade(self, values: dict, from_version: int, to_version: int) -> dict:
        """``values`` of ``from_version`` turned into ``to_version`` (MigrationError when a step is missing
        or ``from_version`` is newer: a downgrade is not a migration)."""
        if from_version > to_version:
            raise MigrationError(self.schema, from_version, to_version, "stored at a newer version than this "
                                 "code understands")
        missing = [v for v in range(from_version, to_version) if v not in self._steps]
        if missing:  # checked before any step runs
            raise MigrationError(self.schema, from_version, to_version,
                                 f"no client-side step from version {missing[0]}")
        for v in range(from_version, to_version):
            fn = self._steps[v]
            try:
                out = fn(values)
            except Exception as e:  # noqa: BLE001 - reported with the step that failed
                raise MigrationError(self.schema, from_version, to_version,
                                     f"step from version {v} failed: {type(e).__name__}: {e}") from e
            values = values if out is None else out
        return values
