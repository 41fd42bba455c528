"""_serde: the serializer the savers use by default — LangGraph's own, without pickle.

Values go through LangGraph's :class:`JsonPlusSerializer` (MessagePack with
its extension types), so what is stored is what LangGraph's other savers
store for the same value, and reading behaves as theirs does under the same
settings:

* **LangGraph's default** (``LANGGRAPH_STRICT_MSGPACK`` unset): stored
  objects are rebuilt as their classes — pydantic models, dataclasses, enums
  of the graph's state — and LangGraph logs its deprecation warning, once
  per type, for a class outside its safe set;
* **strict** (``LANGGRAPH_STRICT_MSGPACK=true``, or ``strict=True``): a class
  is rebuilt only when it is in LangGraph's safe set (messages, documents,
  Send, Interrupt, Command, datetimes, UUIDs, ...), in the allow-list
  LangGraph builds from a compiled graph's schemas (``with_allowlist``), or
  in the savers' ``allowed_modules``; anything else comes back as its
  serialized fields and LangGraph logs "Blocked deserialization of
  module.Class" (once per type), never silently;
* **no pickle, ever.** Values are never written as pickle, and stored data
  whose type is "pickle" is refused on read (:class:`UnsafeValueError`),
  whatever serializer is configured.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langgraph.checkpoint.serde import _msgpack as _lg_msgpack
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer


class UnsafeValueError(ValueError):
    """Stored data would need an unsafe decoder (pickle); it is not decoded."""


#: Serialization types the savers refuse to write or read.
FORBIDDEN_TYPES = frozenset({"pickle"})


class SafeSerializer(JsonPlusSerializer):
    """JsonPlusSerializer as LangGraph configures it by default, without pickle.

    ``strict`` (default: LangGraph's ``LANGGRAPH_STRICT_MSGPACK`` setting)
    restricts rebuilding to LangGraph's safe set, the graph's schemas and
    ``allowed_modules`` — extra ``(module, class name)`` pairs or classes.
    Without it every class is rebuilt, as by LangGraph's own savers.
    """

    def __init__(self, *, allowed_modules: Iterable[tuple[str, ...] | type] = (), strict: bool | None = None) -> None:
        allowed = tuple(allowed_modules)
        if strict is None:
            strict = _lg_msgpack.STRICT_MSGPACK_ENABLED
        super().__init__(pickle_fallback=False, allowed_json_modules=None,
                         allowed_msgpack_modules=(allowed or None) if strict else True)

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        type_, data = super().dumps_typed(obj)
        check_type(type_)
        return type_, data

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        check_type(data[0])
        return super().loads_typed(data)


def check_type(type_: str) -> None:
    if type_ in FORBIDDEN_TYPES:
        raise UnsafeValueError(f"refusing {type_!r} data: the sidecar savers never store or load pickles")


def check_serde(serde: Any) -> None:
    """Refuse serializers configured to fall back to pickle."""
    if getattr(serde, "pickle_fallback", False):
        raise ValueError("a serializer with pickle_fallback=True cannot be used with the sidecar savers")
    inner = getattr(serde, "serde", None)  # EncryptedSerializer and compat wrappers
    if inner is not None and inner is not serde:
        check_serde(inner)
