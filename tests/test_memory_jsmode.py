"""The LANGGRAPH_JS comparison mode (docs/memory.md §3.4) against JavaScript itself.

``Number()`` of strings (random ones built from the characters numeric literals are made of, and a table of
awkward ones), of big integers and of one-element lists is computed by node and by
``memory_filters.js_number``; ``===``/``Array.includes`` by ``js_strict_equal``. The whole mode is tested side
by side with LangGraph.js's InMemoryStore in clients/typescript/test/memory-jsmode.test.ts.
"""
from __future__ import annotations

import json
import math
import random
import shutil
import subprocess

import pytest

from sidecar.state import memory_filters as mf

NODE = shutil.which("node")

TABLE = ["", " ", "12", " 12 ", "\t\n12\u00a0", "\u2003 7 \ufeff", "1.", ".5", "+.5", "-.5", ".", "+", "-", "1e3",
         "1E-3", "1e", "e3", "1e+", "Infinity", "-Infinity", "+Infinity", "infinity", "inf", "NaN", "0x1f", "0X1F",
         "-0x1f", "0o17", "0b101", "0b2", "0x", "1_000", "00012", "-0", "0.1e-400", "1e400", "9007199254740993",
         "0x" + "f" * 300, "12abc", "1,2", "١٢"]


def node_numbers(texts: list[str]) -> list[float]:
    script = ("const xs = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              "process.stdout.write(JSON.stringify(xs.map((x) => { const n = Number(x);"
              " return Number.isNaN(n) ? 'NaN' : n === Infinity ? 'inf' : n === -Infinity ? '-inf' :"
              " Object.is(n, -0) ? '-0' : n; })));")
    out = subprocess.run([NODE, "-e", script], input=json.dumps(texts), capture_output=True, text=True, check=True)
    conv = {"NaN": math.nan, "inf": math.inf, "-inf": -math.inf, "-0": -0.0}
    return [conv.get(x, x) if isinstance(x, str) else float(x) for x in json.loads(out.stdout)]


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_string_to_number_equals_javascript():
    rnd = random.Random(13)
    alphabet = "0123456789+-.eExXoObB_ \tInfity"
    texts = TABLE + ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 8))) for _ in range(3000)]
    texts += [rnd.choice(["", " ", "+", "-"]) + str(rnd.randint(0, 10**30)) + rnd.choice(["", ".", ".5", "e7", "e-330"])
              for _ in range(500)]
    want = node_numbers(texts)
    bad = [(t, mf.js_string_to_number(t), w) for t, w in zip(texts, want) if not same(mf.js_string_to_number(t), w)]
    assert not bad, bad[:10]


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_number_of_big_ints_and_lists_equals_javascript():
    ints = [2**53 + 1, 2**64 + 12345, -(2**70) - 1, 10**308 * 7, 2**1024]
    script = ("process.stdout.write(JSON.stringify(" + json.dumps([str(i) for i in ints]) +
              ".map((s) => { const n = Number(BigInt(s)); return n === Infinity ? 'inf' : n; })))")
    out = json.loads(subprocess.run([NODE, "-e", script], capture_output=True, text=True, check=True).stdout)
    assert [mf.js_number(i) for i in ints] == [math.inf if x == "inf" else float(x) for x in out]
    # Number([x]) is Number(String(x)); "," never parses; [] and [null] are ""
    cases = {"[5]": [5], "['  7 ']": ["  7 "], "[[2.5]]": [[2.5]], "[]": [], "[null]": [None], "[1, 2]": [1, 2],
             "[true]": [True], "[[]]": [[]], "[{}]": [{}], "[[[3]]]": [[[3]]]}
    script = ("process.stdout.write(JSON.stringify([" + ",".join(
        f"(() => {{ const n = Number({k.replace('None', 'null').replace('True', 'true')}); return Number.isNaN(n) ? 'NaN' : n; }})()"
        for k in cases) + "]))")
    out = json.loads(subprocess.run([NODE, "-e", script], capture_output=True, text=True, check=True).stdout)
    for (k, v), w in zip(cases.items(), out):
        assert same(mf.js_number(v), math.nan if w == "NaN" else float(w)), k


def test_strict_equality():
    eq = mf.js_strict_equal
    assert eq(1, 1.0) and eq(-0.0, 0) and eq(None, None) and eq("a", "a") and eq(True, True)
    assert not eq(1, True) and not eq(1, "1") and not eq(None, mf.MISSING) and not eq(math.nan, math.nan)
    assert eq(math.nan, math.nan, True)  # Array.includes
    assert eq(2**60, 2**60) and not eq(2**60, float(2**60))  # a bigint is never === a number
    assert not eq([1], [1]) and not eq({}, {}) and not eq(b"x", b"x")  # objects: never the same reference
    assert mf.js_number(mf.MISSING) != mf.js_number(mf.MISSING) and mf.js_number(None) == 0.0
