"""_serde: the serializer the savers use by default — LangGraph's, locked down.

Values go through LangGraph's own :class:`JsonPlusSerializer` (MessagePack
with its extension types), so what is stored is what LangGraph's other
savers store for the same value. Reading is restricted:

* **strict allow-list.** A stored object is rebuilt only when its class is in
  LangGraph's built-in safe set (messages, documents, Send, Interrupt,
  Command, datetimes, UUIDs, ...), in ``allowed_modules``, or in the list
  LangGraph adds for a compiled graph's state schema (``with_allowlist``,
  active when ``LANGGRAPH_STRICT_MSGPACK=true``). Anything else comes back
  as its serialized fields (LangGraph's behaviour for a blocked type), never
  by importing and calling arbitrary code;
* **no pickle, ever.** Values are never written as pickle, and stored data
  whose type is "pickle" is refused on read (:class:`UnsafeValueError`),
  whatever serializer is configured.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer


class UnsafeValueError(ValueError):
    """Stored data would need an unsafe decoder (pickle); it is not decoded."""


#: Serialization types the savers refuse to write or read.
FORBIDDEN_TYPES = frozenset({"pickle"})


class SafeSerializer(JsonPlusSerializer):
    """JsonPlusSerializer in strict mode, without pickle.

    ``allowed_modules`` are extra ``(module, class name)`` pairs (or classes)
    that may be rebuilt from stored data, on top of LangGraph's safe set.
    """

    def __init__(self, *, allowed_modules: Iterable[tuple[str, ...] | type] = ()) -> None:
        allowed = tuple(allowed_modules)
        super().__init__(pickle_fallback=False, allowed_json_modules=None,
                         allowed_msgpack_modules=allowed or None)

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
