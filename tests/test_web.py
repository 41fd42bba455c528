"""The web inspector (`--http`) in a real browser: Debian's headless chromium driven by Playwright.

A sidecar with a seeded namespace serves the inspector; the browser opens each view, clicks
through a thread's checkpoint tree (a fork, a branch), opens a checkpoint's values, ticks two
checkpoints and diffs them, follows a run to its timeline, and every request the pages make must
go to the sidecar itself. Set SIDECAR_INSPECTOR_SCREENSHOTS=DIR to save screenshots of the main
views there (docs/inspector.md's come from this test).
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from conftest import SidecarProcess
from playwright.sync_api import expect, sync_playwright

from agentstate import Append, event
from inspect_seed import seed_conversation, seed_memory

NS = f"web-{uuid.uuid4().hex[:8]}"
CONV_NS = f"{NS}-conv"  # its own namespace: the thread search of NS stays as it is
SHOTS = os.environ.get("SIDECAR_INSPECTOR_SCREENSHOTS")


def chromium() -> str:
    path = os.environ.get("SIDECAR_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        raise RuntimeError("the browser tests need Debian's chromium (apt-get install chromium; .ci/run does)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    port = free_port()
    proc = SidecarProcess(tmp_path_factory.mktemp("web") / "data", "--http", f"127.0.0.1:{port}").start()
    with proc.client(namespace=NS) as c:
        c.create_thread("support-7", {"user": "bob", "channel": "mail"})
        c.put_checkpoint("chat-1", {"messages": [{"role": "user", "content": "hi"}], "turn": 1},
                         checkpoint_id="c1", metadata={"step": 0})
        c.update_thread("chat-1", {"user": "ann", "channel": "web"})
        c.put_checkpoint("chat-1", {"messages": Append([{"role": "ai", "content": "hello, how can I help?"}]),
                                    "turn": 2}, checkpoint_id="c2", parent_id="c1", metadata={"step": 1})
        c.put_checkpoint("chat-1", {"messages": Append([{"role": "user", "content": "book a table"}]), "turn": 3},
                         checkpoint_id="c3", parent_id="c2", metadata={"step": 2})
        c.put_checkpoint("chat-1", {"messages": Append([{"role": "user", "content": "order a taxi"}]), "turn": 3,
                                    "plan": {"tool": "taxi"}}, checkpoint_id="c3-retry", parent_id="c2",
                         metadata={"step": 2, "source": "time-travel"})
        held = c.runs.start("chat-1", input={"goal": "book"})
        forked = c.runs.start("chat-1", strategy="fork", start_checkpoint_id="c2", branch_thread_id="chat-1-what-if")
        forked.put_checkpoint({"turn": 9}, parent_id="c2", checkpoint_id="w1")
        forked.complete()
        s = held.start_step("tool", "reserve", input={"seats": 2})
        held.end_step(s.step_id, output={"ok": True}, counters={"tokens_in": 30, "tokens_out": 8})
        held.append_events([event("progress", {"pct": 50}, step_id=s.step_id)])
        b = held.begin_effect("booking:42", description="reserve a table", step_id=s.step_id)
        c.effects.complete("booking:42", b.token, {"confirmation": "X1"})
        c.artifacts.upload("chat-1", "receipt.txt", b"table for two", content_type="text/plain", run_id=held.run_id)
        held.put_checkpoint({"messages": Append([{"role": "ai", "content": "booked"}]), "turn": 4},
                            checkpoint_id="c4", parent_id="c3", base_id="c3")
        held.complete({"booked": True})
    with proc.client(namespace=CONV_NS) as c:  # for the conversation, context and memory pages
        seed_conversation(c, "support-chat")
        seed_memory(c)
    yield proc, f"http://127.0.0.1:{port}", held.run_id
    proc.stop()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser, served):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    hosts: list[str] = []
    page.on("request", lambda r: hosts.append(r.url.split("/")[2]))
    yield page
    context.close()
    base_host = served[1].split("/")[2]
    assert hosts and set(hosts) == {base_host}, f"requests left the sidecar: {set(hosts)}"


def shot(page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"inspector-{name}.png"), full_page=True)


def rows(page, table: str) -> list[str]:
    return [t.strip() for t in page.locator(f"#{table} tbody tr td:first-child").all_inner_texts()]


def test_thread_search_by_metadata(page, served):
    page.goto(f"{served[1]}/?ns={NS}")
    expect(page).to_have_title("threads · sidecar inspector")
    assert rows(page, "threads") == ["chat-1", "chat-1-what-if", "support-7"]
    page.fill("input[name=filter]", "user=bob")
    page.click("#search")
    assert rows(page, "threads") == ["support-7"]
    page.fill("input[name=filter]", "user=nobody")
    page.click("#search")
    expect(page.locator("#none")).to_contain_text("No threads")


def test_tree_fork_values_and_diff(page, served):
    page.goto(f"{served[1]}/?ns={NS}&filter=user%3Dann")
    shot(page, "threads")
    page.click("#threads >> text=chat-1 >> nth=0")
    expect(page.locator("h1")).to_have_text("Thread chat-1")
    tree = page.locator("#tree")
    ids = tree.locator("a.cp").all_inner_texts()
    assert ids == ["c1", "c2", "c3", "c4", "c3-retry"]  # the fork's first child's line, then the second's
    c2 = tree.locator("li[data-checkpoint=c2]")
    expect(c2.locator(".badge.fork")).to_have_text("fork · 2")
    expect(tree.locator("li[data-checkpoint=c4] .badge.head")).to_have_text("HEAD")
    assert tree.locator(".badge.head").count() == 1
    expect(c2.locator(".branch")).to_contain_text("chat-1-what-if")
    # the two children of the fork sit in their own nested lists
    assert tree.locator("ul.fork").count() == 2
    assert tree.locator("ul.fork").nth(1).locator("a.cp").all_inner_texts() == ["c3-retry"]
    assert rows(page, "runs") == [served[2]]
    shot(page, "tree")

    page.click("a.cp:text-is('c3-retry')")
    expect(page.locator("#checkpoint-id")).to_have_text("c3-retry")
    values = page.locator("#values")
    expect(values.locator("tr[data-channel=plan] pre")).to_contain_text('"tool": "taxi"')
    expect(values.locator("tr[data-channel=messages] pre")).to_contain_text("order a taxi")
    expect(values.locator("tr[data-channel=turn] pre")).to_have_text("3")
    assert rows(page, "bytes")[0] == "messages"  # the biggest channel first
    shot(page, "checkpoint")
    page.go_back()

    page.check("input[name=pick][value=c3-retry]")
    page.check("input[name=pick][value=c3]")
    page.click("#diff")
    expect(page.locator("h1")).to_have_text("Diff c3 → c3-retry")  # older to newer, whatever the order ticked
    messages = page.locator(".change[data-channel=messages]")
    expect(messages).to_have_attribute("data-kind", "modified")
    expect(messages.locator("p")).to_contain_text("list of 3 → 3 items; the first 2 are shared")
    expect(messages.locator("pre.removed")).to_contain_text("book a table")
    expect(messages.locator("pre.added")).to_contain_text("order a taxi")
    expect(page.locator(".change[data-channel=plan]")).to_have_attribute("data-kind", "added")
    assert page.locator(".change").count() == 2
    shot(page, "diff")


def test_a_diff_needs_two(page, served):
    page.goto(f"{served[1]}/thread?ns={NS}&id=chat-1")
    page.check("input[name=pick][value=c1]")
    page.click("#diff")
    expect(page.locator("#error")).to_have_text("pick two checkpoints to compare (1 picked)")


def test_branch_and_run_timeline(page, served):
    page.goto(f"{served[1]}/thread?ns={NS}&id=chat-1")
    page.click(".branch >> text=chat-1-what-if")
    expect(page.locator("h1")).to_have_text("Thread chat-1-what-if")
    expect(page.locator("#runs")).to_contain_text("branch of chat-1")
    page.goto(f"{served[1]}/thread?ns={NS}&id=chat-1")
    page.click(f"#runs >> text={served[2]}")
    expect(page.locator("#run-status")).to_have_text("success, attempt 1")
    timeline = page.locator("#timeline tbody tr")
    what = [t.strip() for t in timeline.locator("td:nth-child(3)").all_inner_texts()]
    kinds = [t.strip().lower() for t in timeline.locator("td:nth-child(2)").all_inner_texts()]
    assert what[0] == "created" and what[-1] == "ended success"
    for item in ("tool reserve started", "tool reserve ended", "progress", "booking:42 begun", "booking:42 done",
                 "receipt.txt v1"):
        assert item in what, (item, what)
    assert what.index("tool reserve started") < what.index("progress") < what.index("booking:42 begun") \
        < what.index("receipt.txt v1")
    assert set(kinds) == {"run", "step", "event", "effect", "artifact"}
    expect(page.locator("#timeline tr.item-effect").last).to_contain_text('"confirmation": "X1"')
    shot(page, "run")


def test_store_stats_and_missing_things(page, served):
    page.goto(f"{served[1]}/stats?ns={NS}")
    stats = dict(zip(page.locator("#stats th").all_text_contents(), page.locator("#stats td").all_text_contents()))
    assert int(stats["threads"]) == 4 and int(stats["checkpoints"]) >= 6  # 3 in NS, support-chat in CONV_NS
    resp = page.goto(f"{served[1]}/thread?ns={NS}&id=no-such-thread")
    assert resp.status == 404
    expect(page.locator("#error")).to_contain_text("NOT_FOUND")


def test_the_inspector_is_off_unless_asked(sidecar):
    assert not re.search(r"web inspector at", sidecar.log())


def test_read_only_and_loopback(served):
    base = served[1]
    req = urllib.request.Request(f"{base}/thread?ns={NS}&id=chat-1", method="POST", data=b"x")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    assert info.value.code == 405  # no page takes a write


def test_a_taken_port_is_a_start_up_error(tmp_path):
    import subprocess
    import sys
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "sidecar", "serve", "--data-dir", str(tmp_path / "d"),
                              "--listen", f"unix:{tmp_path}/s.sock", "--http", str(port)],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Address already in use" in out.stderr, out.stderr


# ----------------------------------------------------------------- conversations, context, memory

@pytest.fixture(scope="module")
def conv_served(served):
    return served  # seeded in CONV_NS


def test_conversation_with_its_summary_pyramid(page, conv_served):
    base = conv_served[1]
    page.goto(f"{base}/thread?ns={CONV_NS}&id=support-chat")
    page.click("#conversation-link")
    expect(page.locator("h1")).to_have_text("Conversation support-chat")
    expect(page.locator("#counts")).to_contain_text("4 summaries, 1 pending compaction(s)")
    pyramid = page.locator("#pyramid")
    tops = pyramid.locator(":scope > li.summary")
    assert [tops.nth(i).get_attribute("data-summary") for i in range(tops.count())] == ["L2:1-4", "L1:5-6"]
    under = pyramid.locator("li[data-summary='L2:1-4'] ul li.summary")
    assert [under.nth(i).get_attribute("data-summary") for i in range(under.count())] == ["L1:1-2", "L1:3-4"]
    expect(pyramid.locator("li[data-summary='L1:3-4'] .summary-text")).to_have_text("summary of L1:3-4")
    expect(pyramid.locator("li[data-summary='L2:1-4'] > .node")).to_contain_text("items 1–4 (4)")
    rows = page.locator("#items tbody tr")
    assert [rows.nth(i).get_attribute("data-seq") for i in range(rows.count())] == [str(s) for s in range(1, 10)]
    expect(page.locator("#item-3 td").nth(5)).to_contain_text("book a table for two")
    expect(page.locator("#item-3 .covered")).to_have_text("L1:3-4 ‹ L2:1-4")
    expect(page.locator("#item-5 .covered")).to_have_text("L1:5-6")
    expect(page.locator("#item-7 .covered")).to_have_text("L1:7-8 due")
    expect(page.locator("#item-9 .covered")).to_have_text("—")
    expect(page.locator("#compactions tbody tr")).to_contain_text("L1:7-8")
    expect(page.locator("#compactions tbody tr td").nth(1)).to_have_text("pending")
    shot(page, "conversation")
    page.click("#item-3 .covered a:text-is('L2:1-4')")  # to the summary in the pyramid
    assert page.url.endswith("#s-L2:1-4")


def test_context_preview_with_a_budget(page, conv_served):
    base = conv_served[1]
    page.goto(f"{base}/conversation?ns={CONV_NS}&id=support-chat")
    page.click("#context-link")
    expect(page.locator("h1")).to_have_text("Context of support-chat")
    items = page.locator("#context-items tbody tr")
    assert [items.nth(i).get_attribute("data-source") for i in range(items.count())] == [
        "pinned", "summary", "summary", "item", "item", "item"]
    expect(items.nth(1)).to_contain_text("L2:1-4 (items 1–4)")
    expect(items.nth(1).locator("pre")).to_have_text('"summary of L2:1-4"')
    fates = page.locator("#explanation tbody tr")
    assert [fates.nth(i).get_attribute("data-fate") for i in range(fates.count())] == [
        "kept", "summarised", "summarised", "kept", "kept", "kept"]
    expect(fates.nth(1)).to_contain_text("items 1–4")
    expect(fates.nth(1)).to_contain_text("#1 L2:1-4")
    total = int(page.locator("#total").inner_text())

    # one token less: the budget form builds it again, and something old is dropped to fit
    page.fill("#budget", str(total - 1))
    page.click("#build")
    expect(page).to_have_url(re.compile(rf"budget={total - 1}"))
    expect(page.locator("#budget")).to_have_value(str(total - 1))
    assert int(page.locator("#total").inner_text()) <= total - 1
    dropped = page.locator("#explanation tr[data-fate=dropped_budget]")
    expect(dropped.first).to_contain_text("left out: over the budget")
    assert page.locator("#context-items tbody tr").count() < 6
    shot(page, "context")

    # the verbatim tail of the form instead of the policy's (1): with 9 kept, every item is there verbatim
    page.fill("#budget", "8000")
    page.fill("#keep-last", "9")
    page.click("#build")
    expect(page).to_have_url(re.compile(r"keep_last=9"))
    expect(page.locator("#keep-last")).to_have_value("9")
    rows = page.locator("#context-items tbody tr")
    assert [rows.nth(i).get_attribute("data-source") for i in range(rows.count())] == ["pinned"] + ["item"] * 9
    bad = page.goto(f"{base}/context?ns={CONV_NS}&id=support-chat&budget=8000&keep_last=-1")
    assert bad.status == 400
    expect(page.locator("#context-error")).to_contain_text("keep_last '-1'")

    page.fill("#keep-last", "")
    page.fill("#budget", "1")
    page.click("#build")
    expect(page.locator("#context-error")).to_contain_text("FAILED_PRECONDITION")
    expect(page.locator("#context-error")).to_contain_text("the budget is 1")
    assert page.locator("#context-items").count() == 0


def test_memory_browser(page, conv_served):
    base = conv_served[1]
    page.goto(f"{base}/?ns={CONV_NS}")
    page.click("header >> text=Memory")
    expect(page.locator("h1")).to_have_text("Memory")
    assert page.locator("#paths li").all_inner_texts() == ["docs", "users/ann", "users/bob"]
    assert rows(page, "memory-items") == ["readme", "prefs", "prefs"]
    shot(page, "memory")
    page.click("#paths >> text=users/ann")
    expect(page.locator("#prefix")).to_have_text("users/ann")
    assert rows(page, "memory-items") == ["prefs"]  # the deleted item is not live
    page.click("#memory-items >> text=prefs")
    expect(page.locator("#item-key")).to_have_text("prefs")
    expect(page.locator("#item-value")).to_contain_text('"theme": "light"')
    expect(page.locator("#item")).to_contain_text("agent-2")
    history = page.locator("#history tbody tr")
    assert [history.nth(i).get_attribute("data-version") for i in range(history.count())] == ["2", "1"]
    expect(history.nth(1)).to_contain_text('"theme": "dark"')
    shot(page, "memory-item")
    page.click(".crumbs >> text=users")
    assert page.locator("#paths li").all_inner_texts() == ["users/ann", "users/bob"]
    page.goto(f"{base}/memory/item?ns={CONV_NS}&p=users&p=ann&key=scratch")
    expect(page.locator("#gone")).to_contain_text("Deleted or expired")
    assert [t.strip().lower() for t in page.locator("#history tbody tr td.kind").all_inner_texts()] == ["delete", "put"]
    resp = page.goto(f"{base}/memory/item?ns={CONV_NS}&p=users&p=ann&key=never")
    assert resp.status == 404
