"""_store_filter: LangGraph store filters compiled to MemoryFilter trees that evaluate exactly as LangGraph's
InMemoryStore does (docs/memory.md §11.2): every comparison in LANGGRAPH_PYTHON mode, keys in the filter's
order, operators in their map's order, short-circuiting; an operator InMemoryStore does not know becomes a FAIL
node raising its ``ValueError`` at the point it would raise it.
"""
from __future__ import annotations

from typing import Any

from ..v1 import memory_pb2 as mpb
from ..values import encode_into

PY = mpb.COMPARISON_MODE_LANGGRAPH_PYTHON
_OPS = {"$eq": mpb.FILTER_OPERATOR_EQ, "$ne": mpb.FILTER_OPERATOR_NE, "$gt": mpb.FILTER_OPERATOR_GT,
        "$gte": mpb.FILTER_OPERATOR_GTE, "$lt": mpb.FILTER_OPERATOR_LT, "$lte": mpb.FILTER_OPERATOR_LTE}


def _path(path: list) -> mpb.FieldPath:
    return mpb.FieldPath(segments=[mpb.FieldPathSegment(index=s) if isinstance(s, int) else
                                   mpb.FieldPathSegment(key=s) for s in path])


def _cond(path: list, op: int, operand: Any = None, *, has_operand: bool = True) -> mpb.MemoryFilter:
    c = mpb.FieldCondition(path=_path(path), op=op, mode=PY)
    if has_operand:
        encode_into(operand, c.value, "filter")
    return mpb.MemoryFilter(field=c)


def _all(children: list) -> mpb.MemoryFilter:
    if len(children) == 1:
        return children[0]
    return mpb.MemoryFilter(all=mpb.MemoryFilterList(filters=children))


def _compare(path: list, filter_value: Any) -> mpb.MemoryFilter:
    """The tree of InMemoryStore's ``_compare_values(value_at(path), filter_value)``."""
    if isinstance(filter_value, dict):
        if any(k.startswith("$") for k in filter_value):
            children = []
            for op_key, op_value in filter_value.items():
                op = _OPS.get(op_key)
                if op is None:
                    children.append(_cond([], mpb.FILTER_OPERATOR_FAIL,
                                          {"exception": "ValueError", "message": f"Unsupported operator: {op_key}"}))
                else:
                    children.append(_cond(path, op, op_value))
            return _all(children) if children else mpb.MemoryFilter(all=mpb.MemoryFilterList())
        return _all([_cond(path, mpb.FILTER_OPERATOR_IS_TYPE, mpb.MEMORY_VALUE_TYPE_MAP)]
                    + [_compare(path + [k], v) for k, v in filter_value.items()])
    if isinstance(filter_value, (list, tuple)):
        return _all([_cond(path, mpb.FILTER_OPERATOR_IS_TYPE, mpb.MEMORY_VALUE_TYPE_LIST),
                     _cond(path, mpb.FILTER_OPERATOR_LENGTH_EQ, len(filter_value))]
                    + [_compare(path + [i], v) for i, v in enumerate(filter_value)])
    return _cond(path, mpb.FILTER_OPERATOR_EQ, filter_value)


def compile_filter(flt: dict[str, Any] | None) -> mpb.MemoryFilter | None:
    """The MemoryFilter of a SearchOp's filter (None: no filter)."""
    if not flt:
        return None
    return mpb.MemoryFilter(all=mpb.MemoryFilterList(filters=[_compare([key], v) for key, v in flt.items()]))
