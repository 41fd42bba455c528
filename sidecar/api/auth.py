"""auth: who may call what (docs/security.md).

With ``--auth-file PATH`` (or ``--tls-client-ca``) every call of agentstate.v1
is checked here, in one place: :func:`guard` wraps each handler when
``service.add_to_server`` registers it, and :data:`RULES` says, for every RPC
of every service, what it needs (``read``, ``write`` or ``admin``) and where
its request names its namespace. A call without a valid credential gets
UNAUTHENTICATED (``AUTH_REQUIRED`` / ``AUTH_INVALID``); a credential that may
not use the request's namespace, or whose role is too weak, PERMISSION_DENIED
(``NAMESPACE_DENIED`` / ``ROLE_DENIED``). A denied call reaches no handler, so
it changes nothing. Client streams (StreamWrites, UploadArtifact) are checked
again on every message; a stream that outlives a reload of the auth file is
checked against the new file from its next message (or, for a server stream,
its next response) on.

The auth file is TOML::

    [[token]]
    name = "agent-1"                       # for logs; optional
    sha256 = "<64 hex digits>"             # SHA-256 of the token's UTF-8 bytes
    role = "write"                         # read | write | admin
    namespaces = ["team-a", "team-b"]      # or ["*"]: every namespace

    [[client_cert]]                        # mutual TLS (--tls-client-ca)
    subject = "O=Acme,CN=agent-2"          # the certificate's subject in RFC 2253 form (last RDN first)
    role = "read"
    namespaces = ["team-a"]

The file holds only hashes. Tokens are 256-bit random strings
(:func:`new_token`, ``sidecar token``), so one SHA-256 is enough: nobody can
search a space of 2**256 candidates, and a slow password KDF would only add
latency to every call. A presented token's hash is compared with every
entry's with :func:`hmac.compare_digest` (all entries, no early exit).
Roles nest: ``write`` includes ``read``; ``admin`` includes ``write`` and is
needed for the store-wide AdminService calls (which name no namespace).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
import tomllib
from dataclasses import dataclass
from typing import Callable, Iterable

from google.protobuf import message as _message

from ..errors import ApiError
from .validate import DEFAULT_NAMESPACE

log = logging.getLogger("sidecar.auth")

READ, WRITE, ADMIN = "read", "write", "admin"
ROLES = {READ: 1, WRITE: 2, ADMIN: 3}
ALL = "*"
TOKEN_PREFIX = "ast_"
_HEX64 = re.compile(r"[0-9a-f]{64}")


class AuthFileError(ValueError):
    """The auth file cannot be used (the message says where and why)."""


@dataclass(frozen=True)
class Principal:
    """Who a call comes from: a token's or a client certificate's entry."""

    name: str
    role: str
    namespaces: frozenset[str] | None  # None: every namespace

    def may_use(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces


@dataclass(frozen=True)
class Policy:
    tokens: tuple[tuple[bytes, Principal], ...] = ()
    subjects: tuple[tuple[str, Principal], ...] = ()


def new_token() -> str:
    """A fresh bearer token: 32 random bytes, URL-safe base64, with a recognisable prefix."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """The auth file's ``sha256`` of a token."""
    return hashlib.sha256(token.encode()).hexdigest()


def entry_toml(token: str, role: str, namespaces: Iterable[str], name: str = "") -> str:
    """The auth-file entry of ``token`` (TOML; JSON strings are valid TOML basic strings)."""
    namespaces = list(namespaces)
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    if not namespaces:
        raise ValueError("at least one namespace (or '*') is required")
    lines = ["[[token]]"]
    if name:
        lines.append(f"name = {json.dumps(name)}")
    lines += [f'sha256 = "{token_hash(token)}"', f'role = "{role}"',
              f"namespaces = [{', '.join(json.dumps(n) for n in namespaces)}]"]
    return "\n".join(lines) + "\n"


def _principal(entry: dict, where: str, default_name: str) -> Principal:
    role = entry.get("role")
    if role not in ROLES:
        raise AuthFileError(f"{where}: role must be one of {', '.join(ROLES)}, not {role!r}")
    namespaces = entry.get("namespaces")
    if (not isinstance(namespaces, list) or not namespaces
            or not all(isinstance(n, str) and n for n in namespaces)):
        raise AuthFileError(f"{where}: namespaces must be a non-empty list of names (or [\"*\"])")
    name = entry.get("name", default_name)
    if not isinstance(name, str):
        raise AuthFileError(f"{where}: name must be a string")
    return Principal(name, role, None if ALL in namespaces else frozenset(namespaces))


def parse_policy(text: str, source: str = "auth file") -> Policy:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise AuthFileError(f"{source}: not valid TOML: {e}") from None
    unknown = set(doc) - {"token", "client_cert"}
    if unknown:
        raise AuthFileError(f"{source}: unknown table(s) {', '.join(sorted(unknown))} (expected [[token]], "
                            f"[[client_cert]])")
    tokens, subjects, seen = [], [], set()
    for i, entry in enumerate(doc.get("token", [])):
        where = f"{source}: token entry {i + 1}"
        if not isinstance(entry, dict):
            raise AuthFileError(f"{where}: must be a [[token]] table")
        if "token" in entry:
            raise AuthFileError(f"{where}: holds a plain token; the file must hold its sha256 only")
        digest = entry.get("sha256")
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest.lower()):
            raise AuthFileError(f"{where}: sha256 must be 64 hex digits (see `sidecar token`)")
        digest = digest.lower()
        if digest in seen:
            raise AuthFileError(f"{where}: the same token is listed twice")
        seen.add(digest)
        tokens.append((bytes.fromhex(digest), _principal(entry, where, f"token {i + 1}")))
    for i, entry in enumerate(doc.get("client_cert", [])):
        where = f"{source}: client_cert entry {i + 1}"
        if not isinstance(entry, dict):
            raise AuthFileError(f"{where}: must be a [[client_cert]] table")
        subject = entry.get("subject")
        if not isinstance(subject, str) or not subject:
            raise AuthFileError(f"{where}: subject is required")
        if any(s == subject for s, _ in subjects):
            raise AuthFileError(f"{where}: subject {subject!r} is listed twice")
        subjects.append((subject, _principal(entry, where, subject)))
    return Policy(tuple(tokens), tuple(subjects))


def load_policy(path: str) -> Policy:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise AuthFileError(f"cannot read the auth file {path}: {e.strerror}") from None
    return parse_policy(text, path)


# ---------------------------------------------------------------- what each RPC needs

@dataclass(frozen=True)
class Rule:
    """What an RPC needs: a role, and where its request (or each message of a client stream) names
    its namespaces, as (field path, namespace) pairs. ``namespaces`` is None for store-wide calls."""

    access: str
    namespaces: Callable[[object], list[tuple[str, str]]] | None
    per_message: bool = False
    #: the role a request needs when it depends on the request (a batch of reads needs only ``read``)
    access_of: Callable[[object], str] | None = None


def _field(req) -> list[tuple[str, str]]:
    return [("namespace", req.namespace)]


def _batch(req) -> list[tuple[str, str]]:
    out = [("namespace", req.namespace)]
    for i, w in enumerate(req.writes):
        op = w.WhichOneof("op")
        if op:
            out.append((f"writes[{i}].{op}.namespace", getattr(w, op).namespace))
    return out


def _streamed(msg) -> list[tuple[str, str]]:
    out = []
    for i, w in enumerate(msg.writes):
        op = w.WhichOneof("op")
        if op:
            out.append((f"writes[{i}].{op}.namespace", getattr(w, op).namespace))
    return out


def _memory_batch(req) -> list[tuple[str, str]]:
    out = [("namespace", req.namespace)]
    for i, o in enumerate(req.ops):
        kind = o.WhichOneof("op")
        if kind and getattr(o, kind).namespace:
            out.append((f"ops[{i}].{kind}.namespace", getattr(o, kind).namespace))
    return out


def _memory_batch_access(req) -> str:
    return WRITE if any(o.WhichOneof("op") in ("put", "delete") for o in req.ops) else READ


def _upload(msg) -> list[tuple[str, str]]:
    return [("header.namespace", msg.header.namespace)] if msg.WhichOneof("part") == "header" else []


def _import_header(msg) -> list[tuple[str, str]]:
    return [("header.namespace", msg.header.namespace)] if msg.WhichOneof("part") == "header" else []


def _table() -> dict[str, Rule]:
    r, w = Rule(READ, _field), Rule(WRITE, _field)
    admin = Rule(ADMIN, None)
    services = {
        "ThreadService": {
            "CreateThread": w, "GetThread": r, "ListThreads": r, "UpdateThread": w, "DeleteThread": w,
            "CopyThread": w, "PutCheckpoint": w, "PutWrites": w, "GetCheckpoint": r, "ListCheckpoints": r,
            "PruneCheckpoints": w, "DeleteCheckpointsForRuns": w, "DiffCheckpoints": r, "GetChannelHistory": r,
            "BatchWrite": Rule(WRITE, _batch), "StreamWrites": Rule(WRITE, _streamed, per_message=True),
            "ResumeThread": w,  # reads, and under NEW_RUN creates a run (api/resume.py)
        },
        "AdminService": {"GetStoreStats": admin, "CollectGarbage": admin, "CheckIntegrity": admin,
                         "BackupStore": admin, "ReencryptNamespace": Rule(ADMIN, _field)},
        "RunService": {
            "CreateRun": w, "GetRun": r, "ListRuns": r, "ClaimRun": w, "Heartbeat": w, "CompleteRun": w,
            "FailRun": w, "CancelRun": w, "ResumeRun": w, "ListBranches": r, "PromoteBranch": w,
            "StartStep": w, "EndStep": w, "RecordStep": w, "ListSteps": r, "GetThreadUsage": r,
        },
        "EventService": {"AppendEvents": w, "ListEvents": r, "WatchEvents": r},
        "ArtifactService": {
            "UploadArtifact": Rule(WRITE, _upload, per_message=True), "DownloadArtifact": r, "GetArtifact": r,
            "ListArtifacts": r, "SetOfficialArtifact": w,
        },
        "EffectService": {"BeginEffect": w, "CompleteEffect": w, "FailEffect": w, "GetEffect": r,
                          "ListEffects": r},
        "ConversationService": {
            "AppendItems": w, "ListItems": r, "GetItems": r, "PopItem": w, "ClearItems": w, "GetConversation": r,
            "SetPinnedItem": w, "ListPinnedItems": r, "DeletePinnedItem": w,
            "SetCompactionPolicy": w, "GetCompactionPolicy": r, "SetIdlePolicy": w, "GetIdlePolicy": r,
            "ClaimCompaction": w, "SubmitSummary": w, "ListCompactions": r, "ListSummaries": r,
            "ExpandSummary": r, "GetContext": r, "ReportUsage": w,
        },
        "MemoryService": {
            "PutMemoryItem": w, "GetMemoryItem": r, "DeleteMemoryItem": w,
            "BatchMemory": Rule(WRITE, _memory_batch, access_of=_memory_batch_access),
            "ListMemoryNamespaces": r, "SearchMemoryItems": r, "GetMemoryItemHistory": r,
            # without a namespace it sweeps every namespace: a store-wide call
            "SweepExpiredMemoryItems": Rule(WRITE, lambda r: [("namespace", r.namespace)] if r.namespace else [],
                                            access_of=lambda r: WRITE if r.namespace else ADMIN),
        },
        "RetentionService": {
            "SetRetentionPolicy": w, "GetRetentionPolicy": r, "GetUsage": r,
            # a dry run only reads
            "ApplyRetention": Rule(WRITE, _field, access_of=lambda req: READ if req.dry_run else WRITE),
            "SetQuota": Rule(ADMIN, _field), "GetQuota": r,  # namespace quotas (api/quotas.py)
        },
        "SchemaService": {
            "RegisterSchema": w, "GetSchema": r, "ListSchemas": r, "MigrateThread": w, "MigrateNamespace": w,
        },
        # export and import (api/transfer.py): admin of the namespace (an import names it in its header)
        "TransferService": {"ExportNamespace": Rule(ADMIN, _field),
                            "ImportNamespace": Rule(ADMIN, _import_header, per_message=True)},
    }
    return {f"agentstate.v1.{s}/{m}": rule for s, methods in services.items() for m, rule in methods.items()}


#: "agentstate.v1.Service/Method" -> Rule, for every RPC the sidecar serves (tests/test_auth.py checks
#: that it lists every RPC of every service in the protos, and nothing else).
RULES: dict[str, Rule] = _table()


# ---------------------------------------------------------------- checking calls

class Authorizer:
    """The loaded auth file (reloadable) and the checks of one call."""

    def __init__(self, path: str | None, *, client_certs: bool = False) -> None:
        if path is None and not client_certs:
            raise ValueError("an Authorizer needs an auth file or client certificates")
        self.path = path
        #: without an auth file (mutual TLS only) every certificate the CA signed may do everything
        self.certs_only = path is None
        self.policy = load_policy(path) if path else Policy()
        self.generation = 0

    def reload(self) -> Policy:
        """Read the auth file again; on any error the old one stays in force (and the error is raised)."""
        if self.path is None:
            return self.policy
        self.policy = load_policy(self.path)
        self.generation += 1
        return self.policy

    def authenticate(self, context) -> Principal:
        header = None
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                header = value
                break
        if header is not None:
            return self.bearer(header)
        subject = _peer_subject(context)
        if subject is not None:
            if self.certs_only:
                return Principal(subject, ADMIN, None)
            for listed, principal in self.policy.subjects:
                if listed == subject:
                    return principal
            raise ApiError("AUTH_INVALID", f"the client certificate {subject!r} is not in the auth file")
        raise ApiError("AUTH_REQUIRED", "this sidecar requires a credential: send 'authorization: Bearer "
                                        "<token>' metadata" + (" or a client certificate" if self.policy.subjects
                                                               else ""))

    def bearer(self, header: str) -> Principal:
        """The principal of an ``authorization`` value ("Bearer <token>"); AUTH_INVALID when it is none."""
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise ApiError("AUTH_INVALID", "the authorization metadata must be 'Bearer <token>'")
        digest = hashlib.sha256(token.encode(errors="replace")).digest()
        found = None
        for candidate, principal in self.policy.tokens:  # every entry: the time says nothing
            if hmac.compare_digest(candidate, digest):
                found = principal
        if found is None:
            raise ApiError("AUTH_INVALID", "the bearer token is not valid here (unknown or revoked)")
        return found

    def check_http(self, header: str | None, access: str, namespace: str | None = None) -> Principal:
        """The checks of an HTTP request (the metrics endpoint, the web inspector): a bearer token with
        ``access`` and, when given, the right to ``namespace``; ApiError (AUTH_REQUIRED, AUTH_INVALID,
        ROLE_DENIED, NAMESPACE_DENIED) otherwise. Plain HTTP carries no client certificate."""
        if not header:
            raise ApiError("AUTH_REQUIRED", "this sidecar requires a credential: send 'Authorization: Bearer "
                                            "<token>'")
        principal = self.bearer(header)
        if ROLES[principal.role] < ROLES[access]:
            raise ApiError("ROLE_DENIED", f"this page needs the {access} role; the credential has "
                                          f"{principal.role}", role=access, granted=principal.role)
        if namespace is not None and not principal.may_use(namespace or DEFAULT_NAMESPACE):
            raise ApiError("NAMESPACE_DENIED", f"the credential may not use namespace {namespace!r}",
                           namespace=namespace)
        return principal

    @staticmethod
    def http_status(error: ApiError) -> int:
        """The HTTP status of a refusal of :meth:`check_http`: 401 (send WWW-Authenticate: Bearer) for a
        missing or unknown credential, 403 for a credential without the right."""
        return 401 if error.reason in ("AUTH_REQUIRED", "AUTH_INVALID") else 403

    @staticmethod
    def check(principal: Principal, rule: Rule, request=None) -> None:
        """Refuse ``request`` (None: the start of a client stream) if ``principal`` may not make it."""
        access = rule.access
        if rule.access_of is not None and isinstance(request, _message.Message):
            access = rule.access_of(request)
        if ROLES[principal.role] < ROLES[access]:
            raise ApiError("ROLE_DENIED", f"this call needs the {access} role; the credential has "
                                          f"{principal.role}", role=access, granted=principal.role)
        if request is None or rule.namespaces is None or not isinstance(request, _message.Message):
            return  # (a body that does not parse is refused INVALID_ARGUMENT by its handler)
        for field, namespace in rule.namespaces(request):
            namespace = namespace or DEFAULT_NAMESPACE
            if not principal.may_use(namespace):
                raise ApiError("NAMESPACE_DENIED", f"the credential may not use namespace {namespace!r}",
                               namespace=namespace, field=field)


def _peer_subject(context) -> str | None:
    try:
        values = context.auth_context().get("x509_subject")
    except Exception:  # noqa: BLE001 - no TLS on this connection
        return None
    if not values:
        return None
    value = values[0]
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


async def _abort(context, err: ApiError) -> None:
    await context.abort(err.code, err.message,
                        trailing_metadata=(("grpc-status-details-bin", err.to_status().SerializeToString()),))


class _Call:
    """One call's principal, re-derived when the auth file was reloaded since."""

    __slots__ = ("authorizer", "context", "generation", "principal")

    def __init__(self, authorizer: Authorizer, context) -> None:
        self.authorizer = authorizer
        self.context = context
        self.generation = authorizer.generation
        self.principal = authorizer.authenticate(context)

    def current(self) -> Principal:
        if self.generation != self.authorizer.generation:
            self.generation = self.authorizer.generation
            self.principal = self.authorizer.authenticate(self.context)
        return self.principal


def guard(behavior, client_streaming: bool, server_streaming: bool, rule: Rule, authorizer: Authorizer):
    """``behavior`` (a handler of one RPC) behind the checks of ``rule``."""
    check = authorizer.check

    def checked(call: _Call, requests):
        async def gen():
            async for msg in requests:
                check(call.current(), rule, msg)  # ApiError: the handler ends the stream with it
                yield msg
        return gen()

    if not client_streaming and not server_streaming:
        async def unary(request, context):
            try:
                check(_Call(authorizer, context).principal, rule, request)
            except ApiError as e:
                await _abort(context, e)
            return await behavior(request, context)
        return unary

    if not client_streaming:
        async def response_stream(request, context):
            try:
                call = _Call(authorizer, context)
                check(call.principal, rule, request)
            except ApiError as e:
                await _abort(context, e)
            responses = behavior(request, context)
            try:
                async for item in responses:
                    try:
                        check(call.current(), rule, request)
                    except ApiError as e:
                        await _abort(context, e)
                    yield item
            finally:
                await responses.aclose()
        return response_stream

    if not server_streaming:
        async def request_stream(request_iterator, context):
            try:
                call = _Call(authorizer, context)
                check(call.principal, rule)
            except ApiError as e:
                await _abort(context, e)
            return await behavior(checked(call, request_iterator), context)
        return request_stream

    async def bidi(request_iterator, context):
        try:
            call = _Call(authorizer, context)
            check(call.principal, rule)
        except ApiError as e:
            await _abort(context, e)
        responses = behavior(checked(call, request_iterator), context)
        try:
            async for item in responses:
                yield item
        finally:
            await responses.aclose()
    return bidi

