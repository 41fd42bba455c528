"""hotpath: the write path's hashing, chunking, tree building and encoding.

The one facade the rest of the server imports. It picks the compiled module
(``sidecar.storage._hotpath_c``, built from ``_native/_hotpath_c.pyx``) and falls back to
the pure-Python twin (``sidecar.storage._hotpath_py``) when the extension is missing
or ``SIDECAR_NO_EXTENSIONS`` is set to a non-empty value. Both give
byte-identical results.
"""
from __future__ import annotations

import os

NO_EXTENSIONS = bool(os.environ.get("SIDECAR_NO_EXTENSIONS"))

if NO_EXTENSIONS:
    from . import _hotpath_py as _impl
else:
    try:
        from . import _hotpath_c as _impl  # type: ignore[attr-defined, no-redef]
    except ImportError:  # pragma: no cover - exercised by builds without a compiler
        from . import _hotpath_py as _impl  # type: ignore[no-redef]

NATIVE: bool = _impl.NATIVE
implementation = _impl

HASH_SIZE = _impl.HASH_SIZE
KIND_SCALAR = _impl.KIND_SCALAR
KIND_LIST = _impl.KIND_LIST
KIND_MAP = _impl.KIND_MAP
TAG_VALUE = _impl.TAG_VALUE
TAG_CHUNKED = _impl.TAG_CHUNKED
TAG_LIST = _impl.TAG_LIST
TAG_LEAF = _impl.TAG_LEAF
TAG_INNER = _impl.TAG_INNER
TAG_MAP = _impl.TAG_MAP
TAG_MAP_INNER = _impl.TAG_MAP_INNER
TAG_PACKED = _impl.TAG_PACKED
LEAF_ITEMS = _impl.LEAF_ITEMS
CorruptNode = _impl.CorruptNode
UnsupportedValue = _impl.UnsupportedValue

hash_bytes = _impl.hash_bytes
canonicalize = _impl.canonicalize
decompose = _impl.decompose
encode_opaque = _impl.encode_opaque
opaque_parts = _impl.opaque_parts
cdc_cut_points = _impl.cdc_cut_points
value_node = _impl.value_node
list_append = _impl.list_append
list_length = _impl.list_length
map_build = _impl.map_build
map_update = _impl.map_update
map_count = _impl.map_count
build_list = _impl.build_list
build_map = _impl.build_map
children = _impl.children

ID_SIZE = _impl.ID_SIZE
stored_node = _impl.stored_node
canonical_node = _impl.canonical_node
stored_children = _impl.stored_children
stored_encoding = _impl.stored_encoding
stored_list_length = _impl.stored_list_length
stored_list_ids = _impl.stored_list_ids
stored_list_encodings = _impl.stored_list_encodings
stored_map_entries = _impl.stored_map_entries
write_nodes = _impl.write_nodes
INDEX_KEY = _impl.INDEX_KEY
canonical_node_known = _impl.canonical_node_known

# values of an API request (agentstate.v1 messages, read by attribute) -> canonical encodings and trees
wire_encoding = _impl.wire_encoding
wire_tree = _impl.wire_tree
wire_items = _impl.wire_items
wire_entries = _impl.wire_entries
put_channels = _impl.put_channels

# deltas of stored values (a put's list append / keep_first and map set / delete)
list_delta = _impl.list_delta
map_delta = _impl.map_delta
