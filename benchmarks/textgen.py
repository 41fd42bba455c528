"""textgen: reproducible chat-like text for benchmarks.

Sentences of words drawn from a fixed vocabulary with a Zipf-like frequency
(common words often, rare words seldom), capitalised, with commas, full stops
and the odd question, cut to an exact length. Same seed, same text.
"""
from __future__ import annotations

import bisect
import itertools
import random

# Roughly ordered from common to rare; the weight of rank r is 1 / (r + 8).
VOCABULARY = """
the be to of and a in that have it for not on with he as you do at this but his by from they we say her she
or an will my one all would there their what so up out if about who get which go me when make can like time no
just him know take people into year your good some could them see other than then now look only come its over
think also back after use two how our work first well way even new want because any these give day most us is
are was were been has had did said made found thing help need feel try leave call ask seem keep let begin show
hear play run move live believe hold bring happen write provide sit stand lose pay meet include continue set
learn change lead understand watch follow stop create speak read allow add spend grow open walk win offer
remember love consider appear buy wait serve die send expect build stay fall cut reach kill remain suggest
raise pass sell require report decide pull explain hope develop carry break receive agree support hit produce
eat cover catch draw choose cause point listen realise place close involve increase return plan test check
model agent tool call result answer question request reply message context memory prompt token budget step
task goal state value list map channel thread checkpoint branch history version record store write read
file folder server client socket network queue batch commit rollback retry error failure timeout latency
search query index cache page table column row field schema type format parse encode decode stream event
user account order invoice payment price shipping address customer product review rating refund support
weather morning evening travel flight hotel ticket booking schedule meeting calendar reminder deadline
project report summary draft outline chapter section paragraph sentence word phrase example detail note
problem solution approach option idea reason evidence argument claim source reference citation quote
because although however therefore meanwhile instead perhaps probably certainly usually often rarely never
quickly slowly carefully clearly simply exactly nearly almost already still again soon later earlier today
small large long short high low early late young old great little own other same different important
possible public able free sure clear real whole main local likely recent simple similar central common
hard easy full special certain open available popular economic strong possible private specific happy
red blue green yellow black white bright dark warm cold quiet loud heavy light empty busy ready useful
""".split()

_WEIGHTS = list(itertools.accumulate(1.0 / (r + 8) for r in range(len(VOCABULARY))))


class TextGen:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def _word(self) -> str:
        x = self.rng.random() * _WEIGHTS[-1]
        return VOCABULARY[bisect.bisect_left(_WEIGHTS, x)]

    def sentence(self) -> str:
        n = self.rng.randint(5, 18)
        words = [self._word() for _ in range(n)]
        if n > 8 and self.rng.random() < 0.4:
            words[self.rng.randint(3, n - 3)] += ","
        if self.rng.random() < 0.1:
            words.insert(self.rng.randint(1, n - 1), str(self.rng.randint(2, 2048)))
        end = "?" if self.rng.random() < 0.15 else "."
        return " ".join(words).capitalize() + end

    def text(self, length: int) -> str:
        """Exactly ``length`` characters of sentences (ASCII, so also ``length`` bytes)."""
        parts: list[str] = []
        size = -1
        while size < length:
            s = self.sentence()
            parts.append(s)
            size += len(s) + 1
        out = " ".join(parts)[:length]
        return out[:-1] + "." if out.endswith(" ") else out
