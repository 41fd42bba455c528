"""storage/valuetext.py: the server's token estimate over-counts byte-level BPE tokenizers (trained here on
random corpora with the `tokenizers` package: no downloaded vocabularies), pinned values of ``J``, and
``text_of`` (the text fallback summaries and tool-call compression show)."""
from __future__ import annotations

import json
import random
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentstate import codec
from sidecar.storage import valuetext

tokenizers = pytest.importorskip("tokenizers")


def _corpus(seed: int, n: int = 3000) -> list[str]:
    """Random text: words, punctuation, JSON fragments, newlines, non-ASCII, so merges span every kind of byte."""
    rng = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyz      ,.:;\"'{}[]\n\t0123456789éüß日本語✓🙂\\"
    out = []
    for _ in range(n):
        out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(5, 80))))
        out.append(json.dumps({"role": rng.choice(["user", "assistant"]), "content": out[-1]}, ensure_ascii=False))
    return out


@pytest.fixture(scope="module")
def bpes():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    out = []
    for seed, vocab, prefix in ((1, 600, False), (2, 3000, True)):
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        tok.train_from_iterator(_corpus(seed), trainer)
        out.append(tok)
    return out


def count(tok, text: str) -> int:
    return len(tok.encode(text).ids) if text else 0


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False),
              st.text(max_size=40)),
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=8), inner, max_size=5)),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(value=json_values, role=st.sampled_from(["", "user", "assistant", "tool"]),
       call_id=st.sampled_from(["", "call_abc123"]), tool=st.sampled_from(["", "search"]))
def test_the_estimate_over_counts_byte_level_bpe(bpes, value, role, call_id, tool):
    enc = codec.encode(value)
    est = valuetext.estimate(enc, role, call_id, tool)
    # what a provider gives the model for an item: its JSON text (or a string content as it is), and its strings
    texts = [json.dumps(value, ensure_ascii=False, separators=(",", ":"))]
    if isinstance(value, str):
        texts.append(value)
    for tok in bpes:
        for text in texts:
            got = count(tok, text) + count(tok, role) + count(tok, call_id) + count(tok, tool)
            assert got <= est, (text, role, got, est)


def test_json_len_counts_escapes():
    assert valuetext.json_len(codec.encode("ab")) == 4
    assert valuetext.json_len(codec.encode('a"b\n')) == len('"a\\"b\\n"')
    assert valuetext.json_len(codec.encode("\x01")) == len('"\\u0001"')
    assert valuetext.json_len(codec.encode("日本")) == 2 + 6
    assert valuetext.json_len(codec.encode({"k": [1, None, True]})) == len('{"k":[1,null,true]}')
    assert valuetext.json_len(codec.encode(b"abcd")) == 2 + 8
    assert valuetext.json_len(codec.encode(1.5)) == 3
    assert valuetext.json_len(codec.encode(uuid.UUID(int=7))) == 38
    assert valuetext.estimate(codec.encode("hi"), "user") == 8 + 4 + 4


def test_text_of():
    t = valuetext.text_of
    assert t(codec.encode('{"role":"user","content":"hi there"}')) == "hi there"
    assert t(codec.encode("  [1, 2] ")) == "1\n2"
    assert t(codec.encode("{not json")) == "{not json"
    assert t(codec.encode('{"a": NaN}')) == '{"a": NaN}'  # strict JSON only: the string itself
    assert t(codec.encode('{"k": 1, "k": "last"}')) == '{"k":"last"}'
    assert t(codec.encode({"b": [1, 2], "a": None})) == '{"a":null,"b":[1,2]}'
    assert t(codec.encode([{"text": "x"}, None, "", "y"])) == "x\ny"
    assert t(codec.encode({"output": "", "summary": "s"})) == "s"
    assert t(codec.encode(b"\x00\x01\x02")) == '"<3 bytes>"'
    assert t(codec.encode(float("inf"))) == '"Infinity"'
    assert valuetext.cut("abcdef", 4) == "abc\u2026" and valuetext.cut("abc", 3) == "abc"
