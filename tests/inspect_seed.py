"""Seeds a conversation with a summary pyramid and memory items with history, for the inspector's tests
(tests/test_inspect.py, tests/test_web.py).

The conversation (policy: every 3 items summarise the oldest 2, keep 1; two level-1 summaries make a
level-2 one): items 1-9; summaries L1:1-2, L1:3-4, L1:5-6 and L2:1-4 (over L1:1-2 and L1:3-4); L1:7-8
due and unclaimed; item 9 in no compaction; a pinned system item. Memory: users/ann prefs (put twice),
users/ann scratch (put, then deleted), users/bob prefs, docs readme (with a 60-minute TTL).
"""
from __future__ import annotations

from agentstate.conversations import item

WORDS = ["hello there", "hi, how can I help?", "book a table for two", "which evening?", "friday at eight",
         "booked: friday 20:00", "thanks!", "anything else?", "no, bye"]


def seed_conversation(c, thread_id: str) -> list[str]:
    """Returns the summary ids in the order they were submitted."""
    conv = c.conversations
    c.create_thread(thread_id, {"kind": "chat"})
    conv.set_compaction_policy(thread_id=thread_id, trigger_items=3, compact_items=2, keep_last_items=1,
                               pyramid_fan_in=2, pyramid_keep_last=0, fallback_after=3600)
    conv.set_pin("rules", "message", "Answer briefly.", thread_id=thread_id, role="system")
    roles = ["user", "assistant"]
    conv.append(thread_id, [item("message", w, role=roles[i % 2]) for i, w in enumerate(WORDS[:7])])
    done = []
    while (claim := conv.claim_compaction(worker="inspect-test", thread_id=thread_id)) is not None:
        cid = claim.compaction.compaction_id
        conv.submit_summary(claim, f"summary of {cid}", producer="inspect-test/model")
        done.append(cid)
    conv.append(thread_id, [item("message", w, role=roles[(7 + i) % 2]) for i, w in enumerate(WORDS[7:])])
    return done


def seed_memory(c) -> None:
    m = c.memory
    m.put(["users", "ann"], "prefs", {"theme": "dark"}, actor="agent-1", origin="explicit")
    m.put(["users", "ann"], "prefs", {"theme": "light", "lang": "en"}, actor="agent-2", origin="inferred",
          provenance={"thread_id": "chat-1", "conversation_seq": 3})
    m.put(["users", "ann"], "scratch", {"n": 1})
    m.delete(["users", "ann"], "scratch", actor="cleaner")
    m.put(["users", "bob"], "prefs", {"theme": "dark"})
    m.put(["docs"], "readme", {"text": "how to book"}, ttl_minutes=60)
