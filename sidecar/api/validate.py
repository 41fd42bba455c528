"""validate: checks of identifier fields, raising INVALID_ARGUMENT that names the field."""
from __future__ import annotations

from .. import limits
from ..errors import invalid

DEFAULT_NAMESPACE = "default"


def _check(field: str, value: str, max_bytes: int, *, required: bool) -> str:
    if not value:
        if required:
            raise invalid(field, "must not be empty")
        return value
    if "\x00" in value:
        raise invalid(field, "must not contain NUL characters")
    if len(value) > max_bytes or len(value.encode()) > max_bytes:
        raise invalid(field, f"longer than {max_bytes} bytes")
    return value


def namespace(value: str, field: str = "namespace") -> str:
    return _check(field, value, limits.MAX_NAMESPACE_BYTES, required=False) or DEFAULT_NAMESPACE


def ident(value: str, field: str, *, required: bool = True) -> str:
    """Thread, checkpoint, task, run and request ids (they go into LMDB keys)."""
    return _check(field, value, limits.MAX_ID_BYTES, required=required)


def name(value: str, field: str) -> str:
    """Channel names (stored in records, never in keys)."""
    return _check(field, value, limits.MAX_NAME_BYTES, required=True)


def checkpoint_ns(value: str, field: str = "checkpoint_ns") -> str:
    return _check(field, value, limits.MAX_CHECKPOINT_NS_BYTES, required=False)


def task_path(value: str, field: str) -> str:
    return _check(field, value, limits.MAX_TASK_PATH_BYTES, required=False)


def page_size(value: int, field: str = "page_size") -> int:
    if value > limits.MAX_PAGE_SIZE:
        raise invalid(field, f"at most {limits.MAX_PAGE_SIZE}")
    return value or limits.DEFAULT_PAGE_SIZE


def id_list(values, field: str) -> list[str]:
    if len(values) > limits.MAX_IDS_PER_CALL:
        raise invalid(field, f"at most {limits.MAX_IDS_PER_CALL} ids per call")
    return [ident(v, f"{field}[{i}]") for i, v in enumerate(values)]


def text(value: str, field: str, max_bytes: int = limits.MAX_TEXT_BYTES) -> str:
    """Free text (error texts, descriptions, digests, names): at most ``max_bytes`` UTF-8 bytes."""
    if len(value) > max_bytes or len(value.encode()) > max_bytes:
        raise invalid(field, f"longer than {max_bytes} bytes")
    return value
