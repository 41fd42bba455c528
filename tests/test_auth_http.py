"""With --auth-file, the HTTP endpoints check credentials too: /metrics needs an admin bearer token, the web
inspector a token that may read the page's namespace (the store page: admin), taken from the Authorization
header or from the HttpOnly cookie its /login form sets."""
from __future__ import annotations

import socket
import urllib.error
import urllib.parse
import urllib.request

import pytest
from conftest import SidecarProcess

from agentstate import Client
from sidecar.api import auth

NS, OTHER = "team-a", "team-b"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("http-auth")
    tokens = {name: auth.new_token() for name in ("admin", "reader", "other")}
    (base / "auth.toml").write_text("\n".join((
        auth.entry_toml(tokens["admin"], "admin", ["*"], "admin"),
        auth.entry_toml(tokens["reader"], "read", [NS], "reader"),
        auth.entry_toml(tokens["other"], "write", [OTHER], "other"))))
    metrics, web = free_port(), free_port()
    proc = SidecarProcess(base / "data", "--auth-file", str(base / "auth.toml"),
                          "--metrics-listen", f"127.0.0.1:{metrics}", "--http", f"127.0.0.1:{web}")
    proc.start()
    with Client(proc.address, namespace=NS, token=tokens["admin"], timeout=10) as c:
        c.put_checkpoint("t-1", {"n": 1}, checkpoint_id="c1")
    yield proc, tokens, f"http://127.0.0.1:{metrics}", f"http://127.0.0.1:{web}"
    proc.stop()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def get(url: str, token: str | None = None, cookie: str | None = None, data: bytes | None = None):
    """(status, headers (case-insensitive), body) of one request (redirects are not followed)."""
    req = urllib.request.Request(url, data=data)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    if cookie is not None:
        req.add_header("Cookie", cookie)
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def test_metrics_need_an_admin_token(served):
    _, tokens, metrics, _ = served
    status, headers, body = get(metrics + "/metrics")
    assert status == 401 and headers.get("WWW-Authenticate") == "Bearer" and "AUTH_REQUIRED" in body
    assert get(metrics + "/metrics", "not-a-token")[0] == 401
    status, _, body = get(metrics + "/metrics", tokens["reader"])
    assert status == 403 and "ROLE_DENIED" in body
    status, _, body = get(metrics + "/metrics", tokens["admin"])
    assert status == 200 and "sidecar_requests_total" in body


def test_web_pages_check_the_namespace(served):
    _, tokens, _, web = served
    assert get(web + "/healthz")[0] == 200  # for load balancers, no token
    status, _, body = get(web + f"/?ns={NS}")
    assert status == 401 and "<form" in body  # the token form
    assert get(web + f"/?ns={NS}", "not-a-token")[0] == 401
    status, _, body = get(web + f"/?ns={NS}", tokens["reader"])
    assert status == 200 and "t-1" in body
    status, _, body = get(web + f"/thread?ns={NS}&id=t-1", tokens["other"])
    assert status == 403 and "NAMESPACE_DENIED" in body and "c1" not in body
    assert get(web + "/?ns=default", tokens["reader"])[0] == 403  # no ns: the default namespace
    assert get(web + "/stats", tokens["reader"])[0] == 403  # the whole store: admin
    assert get(web + "/stats", tokens["admin"])[0] == 200


def test_web_login_sets_a_cookie_the_pages_accept(served):
    _, tokens, _, web = served
    status, _, body = get(web + "/login", data=urllib.parse.urlencode({"token": "wrong"}).encode())
    assert status == 401 and "AUTH_INVALID" in body
    status, headers, _ = get(web + "/login", data=urllib.parse.urlencode({"token": tokens["reader"]}).encode())
    assert status == 303 and headers["Location"] == "/"
    cookie = headers["Set-Cookie"]  # (a case-insensitive lookup)
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    pair = cookie.split(";", 1)[0]
    status, _, body = get(web + f"/thread?ns={NS}&id=t-1", cookie=pair)
    assert status == 200 and "c1" in body
    assert get(web + f"/thread?ns={OTHER}&id=t-1", cookie=pair)[0] == 403


def test_conversation_context_and_memory_pages_check_the_namespace(served):
    _, tokens, _, web = served
    with Client(served[0].address, namespace=NS, token=tokens["admin"], timeout=10) as c:
        c.memory.put(["users", "ann"], "prefs", {"theme": "dark"})
    for page in ("/conversation?ns={ns}&id=t-1", "/context?ns={ns}&id=t-1&budget=1000", "/memory?ns={ns}",
                 "/memory/item?ns={ns}&p=users&p=ann&key=prefs"):
        url = web + page.format(ns=NS)
        assert get(url)[0] == 401, page
        status, _, body = get(url, tokens["reader"])
        assert status == 200, (page, body)
        status, _, body = get(url, tokens["other"])  # a token for another namespace
        assert status == 403 and "NAMESPACE_DENIED" in body and "dark" not in body, page
        assert get(web + page.format(ns=OTHER), tokens["reader"])[0] == 403, page
