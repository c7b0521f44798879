"""An httpx-style MockTransport on a real 127.0.0.1 socket, for CLI calls and runs that open their own clients.

respx and `httpx.MockTransport` replace the network of a client the test holds; a `userturn probe` started by the
test opens its own. `MockServer` answers from an aiohttp.web server in a thread of its own, so whatever runs in the
test's loop, or in a CLI call that starts its own, sends real bytes through the production client (httpx over
aiohttp). Answers come from handlers of the same shape as an `httpx.MockTransport` handler or a respx side effect
(`httpx.Request -> httpx.Response`), given whole or routed the respx way:

    with MockServer(completion) as server:                     # one handler for everything
        endpoint = Endpoint(EndpointConfig(base_url=server.base_url))
    assert server.bodies("/completions")[0]["max_tokens"] == 32

    with MockServer() as mock:                                  # routes, as with respx.mock(...)
        route = mock.post("/completions").mock(side_effect=completion)
        ...
    assert route.call_count == 12 and json.loads(route.calls[0].request.content)["seed"] == 7

Every request is kept in `requests`; an unrouted one gets a 404 (GET /models, the preflight, a model list).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import httpx
from aiohttp import web

Handler = Callable[[httpx.Request], httpx.Response]


def models_handler(model: str = "mock") -> Handler:
    """A handler that answers GET /v1/models (the endpoint preflight) and 404s everything else."""
    def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [{"id": model, "object": "model"}]})
        return httpx.Response(404, json={"error": {"message": f"no route {request.url.path}"}})
    return handle


def completion_handler(text: Callable[[dict[str, Any]], str] = lambda body: "Why?", model: str = "mock") -> Handler:
    """/v1/models, and completions and chat completions whose text is `text(request body)`."""
    fallback = models_handler(model)

    def handle(request: httpx.Request) -> httpx.Response:
        if request.method != "POST":
            return fallback(request)
        body = json.loads(request.content)
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if request.url.path.endswith("/chat/completions"):
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text(body)},
                                      "finish_reason": "stop"}
        else:
            choice = {"index": 0, "text": text(body), "finish_reason": "stop", "matched_stop": "<|im_end|>"}
        return httpx.Response(200, json={"choices": [choice], "usage": usage})
    return handle


class Call(NamedTuple):
    request: httpx.Request
    response: httpx.Response


class Route:
    """Requests to one method and path (relative to the base URL), answered by `side_effect` or `return_value`."""

    def __init__(self, method: str, path: str) -> None:
        self.method, self.path = method, "/" + path.lstrip("/")
        self.calls: list[Call] = []
        self._answer: Handler | None = None

    def mock(self, side_effect: Handler | None = None, return_value: httpx.Response | None = None) -> Route:
        if side_effect is not None:
            self._answer = side_effect
        elif return_value is not None:
            self._answer = lambda request: return_value
        return self

    @property
    def call_count(self) -> int:
        return len(self.calls)

    def matches(self, request: httpx.Request) -> bool:
        return request.method == self.method and request.url.path == "/v1" + self.path

    def answer(self, request: httpx.Request) -> httpx.Response:
        if self._answer is None:
            raise AssertionError(f"route {self.method} {self.path} has no answer: call .mock(...)")
        response = self._answer(request)
        self.calls.append(Call(request, response))
        return response


class MockServer:
    """Answers on 127.0.0.1 (a free port) from a background thread, from `handler` or from routes; a context
    manager. With `ssl_context` it serves HTTPS (`base_url` says https)."""

    def __init__(self, handler: Handler | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.ssl_context = ssl_context
        self.routes: list[Route] = []
        self.requests: list[httpx.Request] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}/v1"

    def route(self, method: str, path: str) -> Route:
        """A route for `method` on `path` under the base URL, e.g. ("POST", "/completions")."""
        route = Route(method, path)
        self.routes.append(route)
        return route

    def post(self, path: str) -> Route:
        return self.route("POST", path)

    def get(self, path: str) -> Route:
        return self.route("GET", path)

    def _dispatch(self, request: httpx.Request) -> httpx.Response:
        for route in self.routes:
            if route.matches(request):
                return route.answer(request)
        if self.handler is not None:
            return self.handler(request)
        return httpx.Response(404, json={"error": {"message": f"no route for {request.method} {request.url.path}"}})

    def bodies(self, path_suffix: str = "/completions") -> list[dict[str, Any]]:
        """The JSON bodies of the POSTs whose path ends with `path_suffix`, in arrival order."""
        with self._lock:
            return [json.loads(r.content) for r in self.requests
                    if r.method == "POST" and r.url.path.endswith(path_suffix)]

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        mirrored = httpx.Request(request.method, str(request.url), headers=dict(request.headers), content=body)
        with self._lock:
            self.requests.append(mirrored)
        answer = self._dispatch(mirrored)
        content = answer.read()
        headers = {k: v for k, v in answer.headers.items() if k.lower() not in ("content-length", "transfer-encoding")}
        return web.Response(status=answer.status_code, body=content, headers=headers)

    def __enter__(self) -> MockServer:
        started = threading.Event()
        failure: list[BaseException] = []

        async def start() -> None:
            app = web.Application(client_max_size=64 << 20)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.ssl_context)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(start())
            except BaseException as exc:  # pragma: no cover - reported to the starting thread
                failure.append(exc)
                started.set()
                return
            started.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())  # type: ignore[union-attr]
            self._loop.close()

        self._thread = threading.Thread(target=serve, name="mock-http", daemon=True)
        self._thread.start()
        started.wait(10)
        if failure:
            raise failure[0]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
