"""web: the web inspector (``--http HOST:PORT``), the views of ``sidecar inspect`` in a browser.

A Starlette application with Jinja2 templates (``sidecar/web_templates``),
served by uvicorn as a task on the sidecar's own event loop. Read-only: every
page is built by the inspector's views (``sidecar/inspector.py``) from the
api layer's read calls, run on the event loop like a gRPC call's (the view
itself runs on a worker thread). Pages: thread search by metadata, a thread's
checkpoint tree with forks and branches (click a checkpoint for its values,
tick two to diff them), its runs, a run's timeline, store stats, a conversation
with its summary pyramid, the context preview for a budget (a form) with its
explanation, and the memory browser (paths, items, one item's history). The pages
load nothing from elsewhere: styles are inline, there is no script.

Off unless asked; ``--http PORT`` alone binds 127.0.0.1. With ``--auth-file``
every page needs a bearer token (the ``Authorization`` header, or the
HttpOnly cookie the ``/login`` form sets) that may read the page's namespace;
the store page (the whole store) needs an admin token. Without an auth file
there is no authentication: keep it on loopback.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, quote

import uvicorn
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import escape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse
from starlette.routing import Route

from . import inspector
from .api import auth, context, service
from .api import memory as api_memory
from .errors import ApiError

log = logging.getLogger("sidecar.web")

TEMPLATES = os.path.join(os.path.dirname(__file__), "web_templates")


def parse_http(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``PORT`` (then 127.0.0.1) -> (host, port)."""
    if text.isdigit():
        text = f"127.0.0.1:{text}"
    from .metrics import parse_listen
    return parse_listen(text)


class LiveSource:
    """The inspector's source inside a running sidecar: each call runs on the event loop (the store's
    owner), awaited from the worker thread a view runs on."""

    def __init__(self, store, ctx: context.Ctx, loop: asyncio.AbstractEventLoop, memory=None) -> None:
        self.loop = loop
        self._calls = inspector.read_calls(store, ctx, memory if memory is not None else api_memory.Memory(store))
        self._calls[("AdminService", "GetStoreStats")] = lambda r: _in_thread(service.store_stats, store)  # a scan

    def call(self, service_name: str, method: str, request):
        try:
            return asyncio.run_coroutine_threadsafe(self._calls[(service_name, method)](request), self.loop).result(60)
        except ApiError as e:
            raise inspector.InspectError(f"{method}: {e.code.name}: {e.message}") from None

    def close(self) -> None:
        pass


async def _in_thread(fn, *args):
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


#: items the conversation page shows unless asked (``last=0``: all); the context preview's first budget;
#: memory paths and items a memory page lists at most
DEFAULT_LAST_ITEMS = 200
DEFAULT_BUDGET = 8000
MEMORY_PAGE = 500


def _int(text: str | None, default: int) -> int:
    return int(text) if text is not None and text.isdigit() else default


def _path_query(path: list[str]) -> str:
    """``p=label&p=label`` of a memory path (each label URL-encoded)."""
    return "&".join(f"p={quote(label, safe='')}" for label in path)


def _pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)


def _chain(nodes: dict, key) -> dict:
    """A run of checkpoints without forks, then the chains its last one forks into."""
    chain: list[dict] = []
    while True:
        n = nodes[key]
        chain.append(n)
        kids = n["children"]
        if len(kids) != 1:
            return {"nodes": chain, "forks": [_chain(nodes, (key[0], k)) for k in kids]}
        key = (key[0], kids[0])


def tree_chains(model: dict) -> list[tuple[str, list[dict]]]:
    """[(checkpoint_ns, [root chains])] of a ``view_tree`` model."""
    nodes = {(n["checkpoint_ns"], n["checkpoint_id"]): n for n in model["checkpoints"]}
    out: dict[str, list] = {}
    for key, n in nodes.items():
        if not n["parent_checkpoint_id"] or (key[0], n["parent_checkpoint_id"]) not in nodes:
            out.setdefault(key[0], []).append(_chain(nodes, key))
    return sorted(out.items())


class WebInspector:
    """The ASGI application and its uvicorn server (see the module doc)."""

    def __init__(self, store, ctx: context.Ctx, authorizer: auth.Authorizer | None = None, memory=None) -> None:
        self.store = store
        self.ctx = ctx
        self.memory = memory
        self.authorizer = authorizer
        self.env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]))
        self.env.filters["pretty"] = _pretty
        self.env.filters["compact"] = lambda v: json.dumps(v, ensure_ascii=False, sort_keys=True)
        self.app = Starlette(routes=[
            Route("/", self.threads), Route("/thread", self.thread), Route("/checkpoint", self.checkpoint),
            Route("/diff", self.diff), Route("/run", self.run), Route("/stats", self.stats),
            Route("/conversation", self.conversation), Route("/context", self.context),
            Route("/memory", self.memory_paths), Route("/memory/item", self.memory_item),
            Route("/healthz", lambda r: PlainTextResponse("ok")),
            Route("/login", self.login, methods=["GET", "POST"]),
        ])
        self.app = _Credentials(self.app, authorizer)
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task | None = None
        self.address: str | None = None
        self._source: LiveSource | None = None

    # ------------------------------------------------------------ pages

    async def _view(self, fn, *args):
        if self._source is None:
            self._source = LiveSource(self.store, self.ctx, asyncio.get_running_loop(), self.memory)
        return await asyncio.get_running_loop().run_in_executor(None, fn, self._source, *args)

    def _page(self, template: str, status: int = 200, **values) -> HTMLResponse:
        return HTMLResponse(self.env.get_template(template).render(**values), status_code=status)

    async def _guard(self, request: Request, build):
        try:
            return await build()
        except inspector.InspectError as e:
            status = 404 if "NOT_FOUND" in str(e) else 400
            return self._page("error.html", status, message=str(e), ns=request.query_params.get("ns", "default"))

    async def threads(self, request: Request):
        ns = request.query_params.get("ns", "default") or "default"
        text = request.query_params.get("filter", "")

        async def build():
            filters = inspector._parse_filter(text.split()) if text.strip() else {}
            model = await self._view(inspector.view_threads, ns, filters, 1000)
            return self._page("threads.html", ns=ns, filter=text, model=model)

        return await self._guard(request, build)

    async def thread(self, request: Request):
        q = request.query_params
        ns, thread_id = q.get("ns", "default"), q.get("id", "")

        async def build():
            tree = await self._view(inspector.view_tree, ns, thread_id, None)
            runs = await self._view(inspector.view_runs, ns, thread_id)
            return self._page("thread.html", ns=ns, thread_id=thread_id, tree=tree, chains=tree_chains(tree),
                              runs=runs)

        return await self._guard(request, build)

    async def checkpoint(self, request: Request):
        q = request.query_params
        ns, thread_id, cid, cns = q.get("ns", "default"), q.get("thread", ""), q.get("id", ""), q.get("cns", "")

        async def build():
            model = await self._view(inspector.view_checkpoint, ns, thread_id, cid, cns)
            sizes = await self._view(inspector.view_bytes, ns, thread_id, model["checkpoint_id"], cns)
            return self._page("checkpoint.html", ns=ns, m=model, sizes=sizes)

        return await self._guard(request, build)

    async def diff(self, request: Request):
        q = request.query_params
        ns, thread_id, cns = q.get("ns", "default"), q.get("thread", ""), q.get("cns", "")
        picked = q.getlist("pick")

        async def build():
            if len(picked) != 2:
                raise inspector.InspectError(f"pick two checkpoints to compare ({len(picked)} picked)")
            tree = await self._view(inspector.view_tree, ns, thread_id, cns)
            order = [n["checkpoint_id"] for n in tree["checkpoints"]]  # oldest first: diff older -> newer
            a, b = sorted(picked, key=lambda c: order.index(c) if c in order else -1)
            model = await self._view(inspector.view_diff, ns, thread_id, a, b, cns)
            return self._page("diff.html", ns=ns, m=model)

        return await self._guard(request, build)

    async def run(self, request: Request):
        q = request.query_params
        ns, run_id = q.get("ns", "default"), q.get("id", "")

        async def build():
            model = await self._view(inspector.view_run, ns, run_id)
            return self._page("run.html", ns=ns, m=model)

        return await self._guard(request, build)

    async def stats(self, request: Request):
        async def build():
            return self._page("stats.html", ns=request.query_params.get("ns", "default"),
                              stats=await self._view(inspector.view_stats))

        return await self._guard(request, build)

    async def conversation(self, request: Request):
        q = request.query_params
        ns, thread_id = q.get("ns", "default"), q.get("id", "")
        last = _int(q.get("last"), DEFAULT_LAST_ITEMS)

        async def build():
            model = await self._view(inspector.view_conversation, ns, thread_id, last)
            return self._page("conversation.html", ns=ns, m=model, last=last,
                              by_id={s["summary_id"]: s for s in model["summaries"]})

        return await self._guard(request, build)

    async def context(self, request: Request):
        """The context preview: a budget form and, for its budget, the context with its explanation (a
        budget GetContext refuses is shown on the page, so another can be tried)."""
        q = request.query_params
        ns, thread_id = q.get("ns", "default"), q.get("id", "")
        text = q.get("budget", "").strip() or str(DEFAULT_BUDGET)
        keep = q.get("keep_last", "").strip()  # empty: the policy's verbatim tail

        async def build():
            model = problem = None
            if not text.isdigit() or not 1 <= int(text) <= 10_000_000:
                problem = f"budget {text!r}: a whole number of tokens from 1 to 10000000"
            elif keep and not (keep.isdigit() and int(keep) <= 10_000):
                problem = f"keep_last {keep!r}: empty (the policy's) or a whole number of items from 0 to 10000"
            else:
                try:
                    model = await self._view(inspector.view_context, ns, thread_id, int(text),
                                             int(keep) if keep else None)
                except inspector.InspectError as e:
                    if "NOT_FOUND" in str(e):  # an unknown thread: the error page, 404
                        raise
                    problem = str(e)
            return self._page("context.html", 200 if problem is None else 400, ns=ns, thread_id=thread_id,
                              budget=text, keep_last=keep, m=model, problem=problem, why=inspector.FATE_WHY)

        return await self._guard(request, build)

    async def memory_paths(self, request: Request):
        """Memory paths under a prefix (``p=`` once per label) and the live items under it."""
        q = request.query_params
        ns, prefix = q.get("ns", "default"), q.getlist("p")

        async def build():
            paths = await self._view(inspector.view_memory_paths, ns, prefix, MEMORY_PAGE)
            items = await self._view(inspector.view_memory_items, ns, prefix, MEMORY_PAGE)
            return self._page("memory.html", ns=ns, prefix=prefix, paths=paths, items=items, limit=MEMORY_PAGE,
                              path_query=_path_query)

        return await self._guard(request, build)

    async def memory_item(self, request: Request):
        q = request.query_params
        ns, path, key = q.get("ns", "default"), q.getlist("p"), q.get("key", "")

        async def build():
            model = await self._view(inspector.view_memory_item, ns, path, key)
            return self._page("memory_item.html", ns=ns, m=model, path_query=_path_query)

        return await self._guard(request, build)

    async def login(self, request: Request):
        """The token form (with --auth-file): a valid token is kept in an HttpOnly cookie for the pages."""
        if request.method == "GET" or self.authorizer is None:
            return HTMLResponse(_LOGIN)
        token = parse_qs((await request.body()).decode(errors="replace")).get("token", [""])[0].strip()
        try:
            self.authorizer.bearer(f"Bearer {token}")
        except ApiError as e:
            return HTMLResponse(_LOGIN.replace("<!--error-->", f"<p>{e.reason}: {escape(str(e))}</p>"),
                                status_code=401)
        resp = HTMLResponse("", status_code=303, headers={"Location": "/"})
        resp.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
        return resp

    # ------------------------------------------------------------ serving

    async def start(self, listen: str) -> str:
        host, port = parse_http(listen)
        # bound here, so a taken port is an OSError of ours (uvicorn would exit the process)
        sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off")
        self._server = _Server(config)
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]), name="sidecar-web")
        while not self._server.started:
            if self._task.done():
                sock.close()
                self._task.result()
                raise OSError(f"the web inspector could not start on {listen}")
            await asyncio.sleep(0.01)
        self.address = f"{host}:{sock.getsockname()[1]}"
        return self.address

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, 5)
        self._server = self._task = None


class _Server(uvicorn.Server):
    """uvicorn's server without its signal handlers: the sidecar's own stop it (server.py)."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


COOKIE = "sidecar_token"
_LOGIN = """<!doctype html><html><head><meta charset="utf-8"><title>sidecar: token</title></head><body>
<h1>Agent State Sidecar</h1><p>This sidecar requires a token (sidecar token).</p><!--error-->
<form method="post" action="/login"><input type="password" name="token" autofocus>
<button type="submit">Open</button></form></body></html>"""


class _Credentials:
    """ASGI middleware: with an authorizer, every page but /healthz and /login needs a bearer token that
    may read its ``ns`` (default "default"); /stats, the whole store, needs admin. 401 or 403 with the
    token form otherwise."""

    def __init__(self, app, authorizer: auth.Authorizer | None) -> None:
        self.app = app
        self.authorizer = authorizer

    async def __call__(self, scope, receive, send):
        if self.authorizer is None or scope["type"] != "http" or scope["path"] in ("/healthz", "/login"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        header = headers.get("authorization")
        if not header and "cookie" in headers:
            jar = SimpleCookie()
            with contextlib.suppress(Exception):
                jar.load(headers["cookie"])
            if COOKIE in jar and jar[COOKIE].value:
                header = f"Bearer {jar[COOKIE].value}"
        store_wide = scope["path"] == "/stats"
        ns = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("ns", ["default"])[0] or "default"
        try:
            self.authorizer.check_http(header, auth.ADMIN if store_wide else auth.READ, None if store_wide else ns)
        except ApiError as e:
            status = self.authorizer.http_status(e)
            page = _LOGIN.replace("<!--error-->", f"<p>{e.reason}: {escape(str(e))}</p>")
            return await HTMLResponse(page, status_code=status,
                                      headers={"WWW-Authenticate": "Bearer"} if status == 401 else None)(
                scope, receive, send)
        return await self.app(scope, receive, send)
