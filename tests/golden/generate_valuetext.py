"""Regenerate tests/golden/valuetext.json: the golden vectors of the conversation layer's value readers
(sidecar/storage/valuetext.py: ``json_len`` = J, ``estimate`` = raw, ``text_of``, ``cut``) and of the
extractive-v1 fallback summary (sidecar/state/summaries.py ``fallback_text``), docs/conversations.md
"Token counts" and "The fallback summary".

    python tests/golden/generate_valuetext.py

Only the server computes these (the clients neither estimate tokens nor build fallback summaries; they
send their own counts and texts), so tests/test_valuetext_golden.py checks the Python implementation
against the committed file, with and without the compiled extensions. Tests never regenerate it; a
failing test after a code change means the code changed the documented rules. Regenerate only when the
rules change on purpose, and review the diff by hand against the docs.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
_spec = importlib.util.spec_from_file_location("golden_generate", HERE / "generate.py")
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)
S, I, F = golden.S, golden.I, golden.F

# (description, role, call_id, tool_name)
VALUES = [
    (["none"], "", "", ""),
    (["bool", True], "", "", ""),
    (["bool", False], "assistant", "", ""),
    (I(0), "", "", ""),
    (I(-123456), "", "", ""),
    (I(2 ** 64), "", "", ""),
    (I(-(2 ** 70)), "", "", ""),
    (F(1.5), "", "", ""),
    (F(-0.0), "", "", ""),
    (F(1e300), "", "", ""),
    (["float", "nan"], "", "", ""),
    (["float", "inf"], "", "", ""),
    (["float", "-inf"], "", "", ""),
    (S(""), "user", "", ""),
    (S("hi"), "user", "", ""),
    (S("héllo wörld"), "user", "", ""),
    (S("日本語のテキスト"), "user", "", ""),
    (S("emoji 😀👍🏽 and e\u0301"), "assistant", "", ""),
    (S("tab\tnewline\n\x01 quote\" backslash\\ slash/"), "user", "", ""),
    (S("\x7f\u2028\u2029"), "", "", ""),
    (S("  spaced   out\ttext \n"), "", "", ""),
    (S('{"role":"user","content":"hi there"}'), "", "", ""),
    (S('  [1, 2, {"text": "three"}] '), "", "", ""),
    (S("{not json"), "", "", ""),
    (S('{"a": NaN}'), "", "", ""),
    (S('{"k": 1, "k": "last"}'), "", "", ""),
    (S('{"output": "", "summary": "sum"}'), "", "", ""),
    (S('["", null, "x"]'), "", "", ""),
    (S('"quoted"'), "", "", ""),
    (S("[]"), "", "", ""),
    (S('{"arguments": "{\\"city\\": \\"Paris\\"}"}'), "", "c1", "get_weather"),
    (["bytes", ""], "", "", ""),
    (["bytes", "000102"], "", "", ""),
    (["bytes", "00010203"], "", "", ""),
    (["list", []], "", "", ""),
    (["list", [S("a"), ["none"], S(""), I(1), ["list", [S("b"), S("c")]]]], "", "", ""),
    (["map", []], "", "", ""),
    (["map", [[S("b"), ["list", [I(1), I(2)]]], [S("a"), ["none"]]]], "", "", ""),
    (["map", [[S("text"), S("the text")], [S("content"), S("not this")]]], "assistant", "", ""),
    (["map", [[S("text"), S("")], [S("content"), ["list", [["map", [[S("type"), S("output_text")],
                                                                     [S("text"), S("nested")]]]]]]]], "", "", ""),
    (["map", [[S("ключ"), S("значение")], [S("text"), S("Ünïcödé")]]], "assistant", "", ""),
    (["map", [[S("é"), I(1)], [S("z"), I(2)], [S("a"), I(3)]]], "", "", ""),
    (["map", [[S("output"), ["map", [[S("k"), F(0.1)]]]]]], "tool", "c9", ""),
    (["set", [I(3), I(1), I(2)]], "", "", ""),
    (["set", [S("b"), S("a")]], "", "", ""),
    (["datetime", "2024-05-06T07:08:09.123456+00:00"], "", "", ""),
    (["datetime", "2021-11-07T01:30:00", {"zone": "America/New_York", "fold": 1}], "", "", ""),
    (["datetime", "2024-01-02T03:04:05", {"offset_us": 19800000000}], "", "", ""),
    (["uuid", "12345678-1234-5678-1234-567812345678"], "", "", ""),
    (["decimal", "3.14159"], "", "", ""),
    (["decimal", "-1E+10"], "", "", ""),
    (["opaque", "json", "7b7d"], "", "", ""),
    (["opaque", "msgpack", ""], "", "", ""),
    (["list", [["opaque", "pickle", "8004"], S("after")]], "", "", ""),
]

# (inputs [[label, text], ...], max_chars)
FALLBACKS = [
    ([["user", "first question"], ["assistant", "first answer"]], 200),
    ([["user", "  lots   of\n\n whitespace\t here  "]], 200),
    ([["user", "x" * 300]], 200),
    ([["", "child summary one"], ["", "child summary two"]], 200),
    ([["tool_result(search)", "r" * 50], ["user", "short"], ["assistant", "a" * 40]], 64),
    ([["user", "😀" * 30], ["assistant", "日本語" * 10]], 32),
    ([[f"u{i}", "word " * 5] for i in range(30)], 200),
    ([["user", ""]], 16),
]

CUTS = [("abcdef", 4), ("abc", 3), ("abcd", 3), ("😀😀😀", 2), ("", 1)]


def main() -> int:
    from agentstate import codec
    from sidecar.state import summaries
    from sidecar.storage import valuetext

    out = {"comment": __doc__.strip().splitlines()[0], "values": [], "fallback": [], "cut": []}
    for desc, role, call_id, tool in VALUES:
        enc = codec.encode(golden.from_desc(desc))
        out["values"].append({"value": desc, "role": role, "call_id": call_id, "tool_name": tool,
                              "encoding": enc.hex(), "json_len": valuetext.json_len(enc),
                              "estimate": valuetext.estimate(enc, role, call_id, tool),
                              "text_of": valuetext.text_of(enc)})
    for lines, m in FALLBACKS:
        out["fallback"].append({"lines": lines, "max_chars": m,
                                "text": summaries.fallback_text([tuple(x) for x in lines], m)})
    for text, n in CUTS:
        out["cut"].append({"text": text, "n": n, "cut": valuetext.cut(text, n)})
    (HERE / "valuetext.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
