"""The labelling page's server (`userturn label`): aiohttp on 127.0.0.1, every path under an unguessable token.

Routes, all under `/TOKEN/`: the page (`label_page.html`, `.css`, `.js`, package data), `api/state` (labels,
progress, where to start), `api/item/I` (record I of the labeller's order, blind) and `POST api/answer` (one answer,
written to the gold file before the reply). A request without the token, or for another host than the server's
own address (DNS rebinding), is refused with 403. Every reply carries a strict Content-Security-Policy (scripts,
styles and requests from the page's own origin only, no inline code, no frames) and no referrer, so the token stays
in the address bar. Record text reaches the page as JSON and is put in with `textContent` only.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from importlib import resources

from aiohttp import web
from pydantic import ValidationError

from userturn.core.errors import UserError
from userturn.judges.label_session import Answer, LabelSession

HOST = "127.0.0.1"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "Cache-Control": "no-store", "X-Frame-Options": "DENY"}
ASSETS = {"": ("label_page.html", "text/html"), "label_page.css": ("label_page.css", "text/css"),
          "label_page.js": ("label_page.js", "text/javascript")}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def asset(name: str) -> str:
    """One file of the page, from the package."""
    return resources.files("userturn.judges").joinpath(name).read_text(encoding="utf-8")


class LabelServer:
    """The page and its API over one `LabelSession`; `start` binds, `url` is what the labeller opens."""

    def __init__(self, session: LabelSession, port: int = 0) -> None:
        self.session, self.port = session, port
        self.token = secrets.token_urlsafe(24)
        self.runner: web.AppRunner | None = None
        self.pages = {path: (asset(name), kind) for path, (name, kind) in ASSETS.items()}

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/{self.token}/"

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.guard], client_max_size=1 << 20)
        prefix = f"/{self.token}/"
        app.router.add_get(prefix + "api/state", self.state)
        app.router.add_get(prefix + r"api/item/{index:\d+}", self.item)
        app.router.add_post(prefix + "api/answer", self.answer)
        app.router.add_get(prefix + "{asset:[a-z_.]*}", self.page)
        return app

    @web.middleware
    async def guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Refuse what lacks the token or names another host; put the security headers on every reply."""
        head, _, _ = request.path.lstrip("/").partition("/")
        allowed = request.host in (f"{HOST}:{self.port}", f"localhost:{self.port}")
        if not (allowed and secrets.compare_digest(head.encode(), self.token.encode())):
            response: web.StreamResponse = web.Response(status=403, text="forbidden: open the URL userturn label "
                                                        "printed (it carries the session's token)\n")
        else:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                response = web.Response(status=exc.status, text=exc.text)
        response.headers.update(HEADERS)
        return response

    async def page(self, request: web.Request) -> web.Response:
        found = self.pages.get(request.match_info["asset"])
        if found is None:
            raise web.HTTPNotFound()
        text, kind = found
        return web.Response(text=text, content_type=kind, charset="utf-8")

    async def state(self, request: web.Request) -> web.Response:
        return web.json_response(self.session.state())

    async def item(self, request: web.Request) -> web.Response:
        try:
            return web.json_response(self.session.item(int(request.match_info["index"])))
        except UserError as exc:
            return web.json_response({"error": str(exc)}, status=404)

    async def answer(self, request: web.Request) -> web.Response:
        try:
            given = Answer.model_validate_json(await request.read())
            self.session.answer(given)
        except (ValidationError, UserError) as exc:
            return web.json_response({"error": str(exc).splitlines()[0]}, status=400)
        return web.json_response(self.session.state())

    async def start(self) -> None:
        """Bind 127.0.0.1:port (a free one for port 0); a port in use is a UserError naming it."""
        self.runner = web.AppRunner(self.app(), access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, HOST, self.port, reuse_address=False)
        try:
            await site.start()
        except OSError as exc:
            await self.runner.cleanup()
            raise UserError(f"--port {self.port}: cannot listen on {HOST}:{self.port} ({exc.strerror or exc}); "
                            "name another port, or 0 for a free one") from None
        self.port = self.runner.addresses[0][1]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
