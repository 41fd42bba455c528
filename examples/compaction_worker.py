"""A compaction worker: claims due compactions of a namespace, summarises them, submits the summaries.

    python examples/compaction_worker.py unix:sidecar-data/sidecar.sock [--namespace NS] [--once]

``summarise`` stands in for the user's model call (here: the first words of each input, so the example runs
without a model). A worker killed between claim and submit loses nothing: its lease expires and the next
claim takes the compaction over (docs/conversations.md "The worker loop").
"""
from __future__ import annotations

import argparse
import json
import logging

from agentstate import Client
from agentstate.conversations import KIND_NAMES, item_value
from agentstate.errors import FailedPrecondition

log = logging.getLogger("compaction-worker")


def text_of(value) -> str:
    if isinstance(value, str):
        try:
            parsed = json.loads(value)  # items stored as JSON text (the Agents SDK session does)
        except ValueError:
            return value
        return text_of(parsed.get("content", parsed)) if isinstance(parsed, dict) else value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def summarise(compaction) -> str:
    """The user's model call goes here; this one keeps the first words of every input."""
    if compaction.items:
        lines = [f"{it.role or KIND_NAMES[it.kind]}: {' '.join(text_of(item_value(it)).split()[:4])}"
                 for it in compaction.items]
    else:
        lines = [s.text for s in compaction.summaries]
    return "\n".join(lines)[:compaction.max_summary_chars]


def run(address: str, namespace: str, once: bool, worker: str = "example-worker") -> int:
    done = 0
    with Client(address, namespace=namespace) as c:
        while True:
            claim = c.conversations.claim_compaction(worker=worker, wait=0.0 if once else 30.0)
            if claim is None:
                if once:
                    return done
                continue  # nothing became due within 30 s
            try:
                c.conversations.submit_summary(claim, summarise(claim.compaction), producer=f"{worker}/first-words")
                done += 1
            except FailedPrecondition as e:  # SUMMARY_STALE, COMPACTION_DONE, LEASE_LOST: drop it, claim again
                log.info("dropped %s: %s", claim.compaction.compaction_id, e.reason)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--once", action="store_true", help="stop when nothing is due")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    print(f"summarised {run(args.address, args.namespace, args.once)} compactions")


if __name__ == "__main__":
    main()
