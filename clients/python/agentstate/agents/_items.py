"""_items: how an OpenAI Agents SDK item is stored — its JSON text, and the kind, role, call id, tool name and
dedupe key the server is told (docs/conversations.md "The OpenAI Agents SDK Session")."""
from __future__ import annotations

import json
from typing import Any

from blake3 import blake3

from ..v1 import conversations_pb2 as cpb

# the SDK's call/result pairs (agents/run_internal/items.py, 0.24.0), paired by call_id
CALL_TO_OUTPUT = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "computer_call": "computer_call_output",
    "local_shell_call": "local_shell_call_output",
    "shell_call": "shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
    "tool_search_call": "tool_search_output",
    "program": "program_output",
}
OUTPUTS = frozenset(CALL_TO_OUTPUT.values())
SELF_CONTAINED = frozenset({"web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call",
                            "mcp_call", "mcp_list_tools"})


def to_text(item: Any) -> str:
    """The stored text: what ``SQLiteSession`` stores (``json.dumps``), without the spaces; a value JSON
    cannot hold raises TypeError (or ValueError) before anything is stored."""
    return json.dumps(item, separators=(",", ":"))


def _digest(obj: Any) -> bytes:
    return blake3(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).digest()


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def describe(item: Any) -> dict[str, Any]:
    """{kind, role, call_id, tool_name, dedupe_key} of an SDK item (a dict; anything else is OTHER)."""
    out: dict[str, Any] = {"kind": cpb.ITEM_KIND_OTHER, "role": "", "call_id": "", "tool_name": "",
                           "dedupe_key": b""}
    if not isinstance(item, dict):
        return out
    type_ = item.get("type")
    if type_ == "message" or (type_ is None and "role" in item):  # (an EncryptedSession envelope has neither)
        out["kind"] = cpb.ITEM_KIND_MESSAGE
        out["role"] = _str(item.get("role"))[:256]
    elif type_ in CALL_TO_OUTPUT:
        out["kind"] = cpb.ITEM_KIND_TOOL_CALL
        out["call_id"] = _str(item.get("call_id"))
        out["tool_name"] = (_str(item.get("name")) or type_)[:256]
    elif type_ in OUTPUTS:
        out["call_id"] = _str(item.get("call_id"))
        out["kind"] = cpb.ITEM_KIND_TOOL_RESULT if out["call_id"] else cpb.ITEM_KIND_OTHER
        out["dedupe_key"] = _digest({k: v for k, v in item.items() if k not in ("id", "call_id")})
    elif type_ in SELF_CONTAINED:
        out["kind"] = cpb.ITEM_KIND_TOOL_CALL
        out["tool_name"] = _str(item.get("name"))[:256]
    elif type_ == "reasoning":
        out["kind"] = cpb.ITEM_KIND_REASONING
        out["dedupe_key"] = _digest([item.get("summary"), item.get("content")])
    elif type_ == "compaction":
        out["kind"] = cpb.ITEM_KIND_SUMMARY
    call_id = out["call_id"]
    if len(call_id.encode()) > 128 or "\x00" in call_id:  # the server's limit for call ids: keep it apart
        out["call_id"] = ""
        if out["kind"] == cpb.ITEM_KIND_TOOL_RESULT:
            out["kind"] = cpb.ITEM_KIND_OTHER
    return out
