"""logs: the sidecar's log set-up (``--log-format text|json``) and its request log.

Every RPC of the agentstate.v1 services ends with one line on the
``sidecar.requests`` logger (written by the wrapper in ``sidecar/metrics.py``):
DEBUG when it succeeded, INFO when it failed with a caller's error, WARNING for
INTERNAL, UNKNOWN, DATA_LOSS and UNAVAILABLE. The line carries the call, its
status code and ErrorInfo reason, its duration, and the namespace, thread,
run and request ids of the request when it has such fields. In JSON each is
a key of its own (one object per line); in text they follow the message.
"""
from __future__ import annotations

import json
import logging
import sys
import time

from google.protobuf import message_factory
from google.rpc import error_details_pb2, status_pb2

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: fields of a request (when its message has them) that go on its log line
ID_FIELDS = ("namespace", "thread_id", "run_id", "request_id")
#: LogRecord attributes the JSON formatter writes as keys of their own
EXTRA_FIELDS = ("rpc", "code", "reason", "duration_ms", *ID_FIELDS, "peer")
_WARN_CODES = {"INTERNAL", "UNKNOWN", "DATA_LOSS", "UNAVAILABLE"}

requests_log = logging.getLogger("sidecar.requests")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the request fields, and the
    exception's traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        t = time.gmtime(record.created)
        out = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(record.msecs):03d}Z",
               "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        for name in EXTRA_FIELDS:
            value = getattr(record, name, None)
            if value not in (None, ""):
                out[name] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """The classic line, with the request fields appended as ``key=value``."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = [f"{name}={getattr(record, name)}" for name in (*ID_FIELDS, "peer")
                 if getattr(record, name, None) not in (None, "")]
        return f"{line} {' '.join(extra)}" if extra else line


def configure(level: str = "INFO", fmt: str = "text", stream=None) -> None:
    """Set up the root logger once for the process (``sidecar serve``)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # grpc's asyncio engine logs a line per call at DEBUG ("Loaded running loop"): not ours to show
    logging.getLogger("grpc._cython.cygrpc").setLevel(max(logging.INFO, root.level))


def id_getter(descriptor):
    """A function ``request -> {field: value}`` of the ID_FIELDS request type ``descriptor`` has."""
    names = [n for n in ID_FIELDS if n in descriptor.fields_by_name
             and descriptor.fields_by_name[n].type == descriptor.fields_by_name[n].TYPE_STRING]
    request_type = message_factory.GetMessageClass(descriptor)

    def ids(request) -> dict | None:
        if not names or not isinstance(request, request_type):  # a MalformedRequest has none
            return None
        return {n: getattr(request, n) for n in names}

    return ids


def _reason(context) -> str:
    """The ErrorInfo reason in a failed call's trailing status details, if any."""
    try:
        for key, value in context.trailing_metadata() or ():
            if key == "grpc-status-details-bin":
                status = status_pb2.Status.FromString(value)
                for detail in status.details:
                    if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                        info = error_details_pb2.ErrorInfo()
                        detail.Unpack(info)
                        return info.reason
    except Exception:  # noqa: BLE001 - a log line never fails a call
        pass
    return ""


def request(rpc: str, code: str, seconds: float, ids, request, context) -> None:
    """Log one finished call (see the module doc for levels and fields); ``ids`` is the call's
    :func:`id_getter` (None for a client stream), asked only when the line is written."""
    level = logging.DEBUG if code == "OK" else logging.WARNING if code in _WARN_CODES else logging.INFO
    if not requests_log.isEnabledFor(level):
        return
    extra = {"rpc": rpc, "code": code, "duration_ms": round(seconds * 1000, 3)}
    found = ids(request) if ids is not None else None
    if found:
        extra.update(found)
    # a cancelled call's context is not read: grpc.aio's context of a call the client cancelled crashed
    # the process when asked for its trailing metadata or peer from a server stream's wrapper
    reason = _reason(context) if code not in ("OK", "CANCELLED") and context is not None else ""
    if reason:
        extra["reason"] = reason
    if context is not None and code != "CANCELLED":
        try:
            extra["peer"] = context.peer()
        except Exception:  # noqa: BLE001
            pass
    requests_log.log(level, "%s %s%s in %.1f ms", rpc, code, f" {reason}" if reason else "", seconds * 1000,
                     extra=extra)
