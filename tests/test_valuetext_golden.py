"""Golden vectors of the conversation layer's value readers (tests/golden/valuetext.json, made by
tests/golden/generate_valuetext.py and reviewed against docs/conversations.md): J (``json_len``), the
token estimate (``estimate``), ``text_of``, ``cut`` and the extractive-v1 fallback text.

Only the server computes these: the TypeScript and Go clients send their own token counts and summary
texts and reimplement none of them, and valuetext has no compiled twin, so this Python test is the whole
check. It never regenerates the file."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from agentstate import codec
from sidecar.state import summaries
from sidecar.storage import valuetext

GOLDEN = Path(__file__).resolve().parent / "golden"
VECTORS = json.loads((GOLDEN / "valuetext.json").read_text())
_spec = importlib.util.spec_from_file_location("golden_generate", GOLDEN / "generate.py")
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)


def _id(v) -> str:
    return json.dumps(v["value"], ensure_ascii=False)[:60]


@pytest.mark.parametrize("v", VECTORS["values"], ids=_id)
def test_value_vector(v):
    enc = codec.encode(golden.from_desc(v["value"]))
    assert enc.hex() == v["encoding"]
    assert valuetext.json_len(enc) == v["json_len"]
    assert valuetext.estimate(enc, v["role"], v["call_id"], v["tool_name"]) == v["estimate"]
    assert valuetext.text_of(enc) == v["text_of"]


@pytest.mark.parametrize("f", VECTORS["fallback"], ids=lambda f: f"{len(f['lines'])}x{f['max_chars']}")
def test_fallback_vector(f):
    got = summaries.fallback_text([tuple(x) for x in f["lines"]], f["max_chars"])
    assert got == f["text"]
    assert len(got) <= f["max_chars"]


@pytest.mark.parametrize("c", VECTORS["cut"], ids=lambda c: f"{c['text']}/{c['n']}")
def test_cut_vector(c):
    assert valuetext.cut(c["text"], c["n"]) == c["cut"]


def test_the_vectors_cover_every_kind_of_value():
    kinds = {v["value"][0] for v in VECTORS["values"]}
    assert kinds >= {"none", "bool", "int", "float", "str", "bytes", "list", "map", "set", "datetime", "uuid",
                     "decimal", "opaque"}
    assert len(VECTORS["values"]) >= 50 and len(VECTORS["fallback"]) >= 8


def test_a_summary_is_estimated_as_its_rendered_item():
    """A summary's raw is the estimate of the SUMMARY item GetContext renders (its text as a string value):
    newlines and quotes count with their JSON escapes, as for every item."""
    text = 'user: a "quoted"\nassistant: b'
    rec = summaries.new_summary(1, 2, 2, text, "p", True, None, b"\0" * 32, 10, [], 0, 0, "")
    assert rec.raw == valuetext.estimate(codec.encode(text)) == 8 + len(json.dumps(text))
