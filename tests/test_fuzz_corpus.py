"""Replays the committed fuzzing corpus (tests/fuzz_corpus/TARGET/, grown by scripts/fuzz.py under atheris)
through the fuzz targets of tests/fuzz_targets.py: the value codec (compiled and pure-Python twins must
agree), the request decoders and validation, and the stored-node readers (damage is CorruptNode, nothing
else, and both twins agree). Every input the fuzzer ever kept, and every crash it found once fixed, stays
a test here."""
from __future__ import annotations

from pathlib import Path

import pytest

import fuzz_targets

CORPUS = Path(__file__).resolve().parent / "fuzz_corpus"


@pytest.mark.parametrize("target", sorted(fuzz_targets.TARGETS))
def test_corpus_replays_clean(target):
    files = sorted((CORPUS / target).iterdir())
    assert len(files) >= 20, f"the {target} corpus is missing (scripts/fuzz.py {target} --seed-only)"
    fn = fuzz_targets.TARGETS[target]
    for path in files:
        try:
            fn(path.read_bytes())
        except Exception as e:  # noqa: BLE001 - name the input
            raise AssertionError(f"{path.name}: {type(e).__name__}: {e}") from e


def test_the_targets_can_fail():
    """The targets are not vacuous: a twin that disagrees, or a reader raising something else, is caught."""
    real = fuzz_targets.TWINS[:]
    try:
        class Broken:
            @staticmethod
            def canonicalize(data):
                return b"different"

            decompose = canonicalize
        fuzz_targets.TWINS[:] = [real[0], Broken]
        with pytest.raises(AssertionError, match="twins differ"):
            fuzz_targets.codec(b"\xc0")
    finally:
        fuzz_targets.TWINS[:] = real
    with pytest.raises(IndexError):  # not swallowed: only CorruptNode / UnsupportedValue are
        fuzz_targets._outcome(lambda data: data[10], b"")
