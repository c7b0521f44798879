"""A fast OpenAI-compatible loopback server for tests and benchmarks (aiohttp.web on uvloop).

Run it as a process::

    python tests/support/loopback_server.py --port 0 [--latency-ms L] [--fail-first N --fail-status 503]
                                    [--fail-mode status|close|invalid-json|slow|empty-choices|huge|huge-chunked]
                                    [--retry-after S] [--huge-bytes B] [--api-key KEY] [--echo-auth]
                                    [--hang-after N]

It prints ``READY <port>`` on stdout once listening (port 0 picks a free port). Endpoints:

* ``POST /v1/completions`` and ``POST /v1/chat/completions``: a short deterministic reply derived from the
  prompt (or the last message), ``finish_reason`` "stop", ``matched_stop`` "<|im_end|>", usage with token
  counts of about len/4, ``n`` choices when ``n`` is given; ``max_tokens`` cuts the reply (finish "length").
* ``GET /v1/models``, ``GET /health``, ``GET /health_generate`` (SGLang's), ``GET /stats`` (request counters as
  JSON), with ``--model-path P`` SGLang's ``GET /model_info`` (``{"model_path": P, ...}``), and with ``--props
  JSON`` llama-server's ``GET /props``. ``--log-bodies PATH`` appends each generation request's body to PATH as a
  JSON line.

``--sglang`` answers as SGLang does: ``matched_stop`` is the first of the request's ``stop_token_ids`` (else its
first ``stop`` string), and an assistant turn asked for (a chat completion, or a prompt that ends at an assistant
header) is an answer that states a number ("... The answer is N.") instead of a user turn.

Fault injection applies to the first N POSTs: an HTTP status (with an optional Retry-After), a dropped
connection, a truncated JSON body, a reply slower than ``--slow-ms``, a 200 with ``choices: []``, or a 200 whose
text is ``--huge-bytes`` long (with a Content-Length, or chunked without one). ``--echo-auth`` makes the 401 of a
wrong key and injected error statuses quote the request's Authorization header back, as careless servers do.
``--hang-after N`` answers N POSTs, then never answers another (a wedged scheduler; GET /models still answers).

From Python, `LoopbackServer` starts the process, waits for READY and exposes `base_url` and `stats()`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import select
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

STOP_TOKEN = "<|im_end|>"
SPECIAL_TOKEN = re.compile(r"<\|[^|>]*\|>(?:system|user|assistant)?")
FaultMode = Literal["status", "close", "invalid-json", "slow", "empty-choices", "huge", "huge-chunked"]


class ServerConfig(BaseModel):
    """Behaviour of one loopback server process."""

    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535)
    latency_ms: float = Field(default=0.0, ge=0)
    fail_first: int = Field(default=0, ge=0, description="inject a fault into the first N POSTs")
    fail_status: int = Field(default=503, ge=400, le=599)
    fail_mode: FaultMode = "status"
    retry_after: str | None = Field(default=None, description="Retry-After header sent with injected statuses")
    slow_ms: float = Field(default=5000.0, ge=0, description="delay of a 'slow' fault")
    api_key: str | None = Field(default=None, description="require 'Authorization: Bearer KEY' when set")
    echo_auth: bool = Field(default=False, description="quote the Authorization header in 401s and injected errors")
    huge_bytes: int = Field(default=50_000_000, ge=0, description="text length of a 'huge' fault's reply")
    model: str = "loopback"
    hang_after: int | None = Field(default=None, ge=0, description="answer this many POSTs, then hang on every other")
    model_path: str | None = Field(default=None, description="weights named by GET /model_info (SGLang's route)")
    sglang: bool = Field(default=False, description="SGLang's matched_stop; assistant turns answered with a number")
    props: dict[str, Any] | None = Field(default=None, description="answered by GET /props (llama-server's route)")
    log_bodies: str | None = Field(default=None, description="append every generation request's body to this file")


def reply_text(source: str, index: int = 0) -> str:
    """A short deterministic user turn derived from `source` (special tokens dropped)."""
    words = SPECIAL_TOKEN.sub(" ", source).split()
    tail = " ".join(words[-6:]) if words else "that"
    suffix = f" (variant {index + 1})" if index else ""
    return f"Thanks. Could you say more about {tail}?{suffix}"


ASSISTANT_HEADER = re.compile(r"(?:<\|im_start\|>|<\|start\|>)assistant(?:<\|channel\|>\w+<\|message\|>)?\s*"
                              r"(?:<think>\s*</think>\s*)?$")


def assistant_text(source: str) -> str:
    """A short deterministic assistant answer to `source` that states a numeric final answer."""
    words = SPECIAL_TOKEN.sub(" ", source).split()
    return f"Working through: {' '.join(words[-5:])}. The answer is {len(words) % 50 + 2}."


def approx_tokens(text: str) -> int:
    """Token count stand-in: about four characters per token, at least one."""
    return max(1, len(text) // 4)


def _cut(text: str, max_tokens: Any) -> tuple[str, str, str | int | None]:
    """(text, finish_reason, matched_stop) after applying `max_tokens`."""
    if isinstance(max_tokens, int) and max_tokens > 0 and approx_tokens(text) > max_tokens:
        return text[: max_tokens * 4], "length", None
    return text, "stop", STOP_TOKEN


def sglang_matched_stop(payload: dict[str, Any]) -> str | int:
    """What SGLang reports as `matched_stop`: the stop token id or string that ended the generation."""
    for field in ("stop_token_ids", "stop"):
        given = payload.get(field)
        if isinstance(given, list) and given:
            return given[0]
        if isinstance(given, str | int) and not isinstance(given, bool):
            return given
    return STOP_TOKEN


def completion_body(payload: dict[str, Any], serial: int, model: str, sglang: bool = False) -> dict[str, Any]:
    """The /v1/completions answer for `payload` (`sglang`: as SGLang answers, see the module docstring)."""
    prompt = payload.get("prompt") or ""
    if isinstance(prompt, list):
        prompt = " ".join(str(p) for p in prompt)
    n = int(payload.get("n") or 1)
    choices = []
    completion_tokens = 0
    answering = sglang and ASSISTANT_HEADER.search(str(prompt)) is not None
    for i in range(n):
        text = assistant_text(str(prompt)) if answering else reply_text(str(prompt), i)
        text, finish, matched = _cut(text, payload.get("max_tokens"))
        if sglang and matched is not None:
            matched = sglang_matched_stop(payload)
        completion_tokens += approx_tokens(text)
        choices.append({"index": i, "text": text, "logprobs": None, "finish_reason": finish, "matched_stop": matched})
    prompt_tokens = approx_tokens(str(prompt))
    return {
        "id": f"cmpl-{serial}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": payload.get("model") or model,
        "choices": choices,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def chat_body(payload: dict[str, Any], serial: int, model: str, sglang: bool = False) -> dict[str, Any]:
    """The /v1/chat/completions answer for `payload` (`sglang`: an assistant answer that states a number)."""
    messages = payload.get("messages") or []
    last = str(messages[-1].get("content") or "") if messages and isinstance(messages[-1], dict) else ""
    everything = " ".join(str(m.get("content") or "") for m in messages if isinstance(m, dict))
    n = int(payload.get("n") or 1)
    choices = []
    completion_tokens = 0
    for i in range(n):
        text, finish, matched = _cut(assistant_text(last) if sglang else reply_text(last, i), payload.get("max_tokens"))
        if sglang and matched is not None:
            matched = sglang_matched_stop(payload)
        completion_tokens += approx_tokens(text)
        choices.append({"index": i, "message": {"role": "assistant", "content": text},
                        "finish_reason": finish, "matched_stop": matched})
    prompt_tokens = approx_tokens(everything)
    return {
        "id": f"chatcmpl-{serial}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": payload.get("model") or model,
        "choices": choices,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def build_app(config: ServerConfig) -> Any:
    """The aiohttp application (imported lazily so `LoopbackServer` users need no aiohttp)."""
    import orjson
    from aiohttp import web

    counts: Counter[str] = Counter()
    posts = 0

    def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
        return web.Response(body=orjson.dumps(body), status=status, content_type="application/json",
                            headers=headers)

    def echoed(request: web.Request) -> str:
        return f" (got Authorization: {request.headers.get('authorization')})" if config.echo_auth else ""

    def unauthorized(request: web.Request) -> web.Response | None:
        if config.api_key and request.headers.get("authorization") != f"Bearer {config.api_key}":
            counts["unauthorized"] += 1
            return json_response({"error": {"message": f"invalid API key{echoed(request)}", "type": "auth"}},
                                 status=401)
        return None

    async def huge(request: web.Request, chunked: bool) -> web.StreamResponse:
        head, tail = b'{"choices": [{"index": 0, "text": "', b'", "finish_reason": "length"}]}'
        block = b"x" * 65536
        if not chunked:
            body = head + block * (config.huge_bytes // len(block)) + b"x" * (config.huge_bytes % len(block)) + tail
            return web.Response(body=body, content_type="application/json")
        response = web.StreamResponse(headers={"content-type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            await response.write(head)
            for _ in range(config.huge_bytes // len(block)):
                await response.write(block)
            await response.write(tail)
            await response.write_eof()
        except ConnectionError:  # the client stopped reading (as it should, at its cap)
            pass
        return response

    async def fault(request: web.Request) -> web.StreamResponse | None:
        """Apply the injected fault to this POST if it is among the first N; None lets it through."""
        nonlocal posts
        posts += 1
        if posts > config.fail_first:
            return None
        counts["faults"] += 1
        if config.fail_mode == "status":
            headers = {"retry-after": config.retry_after} if config.retry_after is not None else None
            message = f"injected fault {posts}/{config.fail_first}{echoed(request)}"
            return json_response({"error": {"message": message}}, status=config.fail_status, headers=headers)
        if config.fail_mode == "close":
            assert request.transport is not None
            request.transport.abort()
            raise asyncio.CancelledError  # aiohttp drops the handler without writing a response
        if config.fail_mode == "invalid-json":
            return web.Response(body=b'{"id": "cmpl-x", "choices": [{"text": "cut', content_type="application/json")
        if config.fail_mode == "empty-choices":
            return json_response({"id": "cmpl-x", "object": "text_completion", "choices": []})
        if config.fail_mode in ("huge", "huge-chunked"):
            return await huge(request, chunked=config.fail_mode == "huge-chunked")
        await asyncio.sleep(config.slow_ms / 1000)  # "slow": answer normally, but late
        return None

    async def generate(request: web.Request, kind: str) -> web.StreamResponse:
        counts[kind] += 1
        counts["requests"] += 1
        if (denied := unauthorized(request)) is not None:
            return denied
        if (injected := await fault(request)) is not None:
            return injected
        counts["admitted"] += 1
        if config.hang_after is not None and counts["admitted"] > config.hang_after:
            counts["hung"] += 1
            await asyncio.Event().wait()  # never answers (the client's timeout ends it)
        try:
            payload = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return json_response({"error": {"message": "request body is not JSON"}}, status=400)
        if not isinstance(payload, dict):
            return json_response({"error": {"message": "request body must be a JSON object"}}, status=400)
        if config.log_bodies:
            with open(config.log_bodies, "ab") as fh:
                fh.write(orjson.dumps(payload) + b"\n")
        if config.latency_ms:
            await asyncio.sleep(config.latency_ms / 1000)
        serial = counts[kind]
        body = completion_body(payload, serial, config.model, config.sglang) if kind == "completions" else \
            chat_body(payload, serial, config.model, config.sglang)
        counts["answered"] += 1
        return json_response(body)

    async def completions(request: web.Request) -> web.StreamResponse:
        return await generate(request, "completions")

    async def chat(request: web.Request) -> web.StreamResponse:
        return await generate(request, "chat")

    async def models(request: web.Request) -> web.Response:
        counts["models"] += 1
        counts["requests"] += 1
        if (denied := unauthorized(request)) is not None:
            return denied
        return json_response({"object": "list", "data": [{"id": config.model, "object": "model", "owned_by": "me"}]})

    async def health(request: web.Request) -> web.Response:
        counts["health"] += 1
        return json_response({"status": "ok"})

    async def health_generate(request: web.Request) -> web.Response:
        counts["health_generate"] += 1
        return web.Response(status=200)

    async def model_info(request: web.Request) -> web.Response:
        counts["model_info"] += 1
        if (denied := unauthorized(request)) is not None:
            return denied
        return json_response({"model_path": config.model_path, "tokenizer_path": config.model_path,
                              "is_generation": True})

    async def stats(request: web.Request) -> web.Response:
        return json_response(dict(counts))

    async def props(request: web.Request) -> web.Response:
        counts["props"] += 1
        return json_response(config.props)

    app = web.Application()
    app.add_routes([
        web.post("/v1/completions", completions),
        web.post("/v1/chat/completions", chat),
        web.get("/v1/models", models),
        web.get("/health", health),
        web.get("/health_generate", health_generate),
        web.get("/stats", stats),
        *([web.get("/model_info", model_info)] if config.model_path is not None else []),
        *([web.get("/props", props)] if config.props is not None else []),
    ])
    return app


async def serve(config: ServerConfig) -> None:
    """Listen, print READY <port>, serve until cancelled."""
    from aiohttp import web

    runner = web.AppRunner(build_app(config), access_log=None, handle_signals=True)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port, backlog=4096)
    await site.start()
    port = runner.addresses[0][1]
    print(f"READY {port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def parse_args(argv: list[str] | None = None) -> ServerConfig:
    parser = argparse.ArgumentParser(allow_abbrev=False,
                                     description="OpenAI-compatible loopback server for tests and benchmarks.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed as READY <port>)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added delay per generation request")
    parser.add_argument("--fail-first", type=int, default=0, help="inject a fault into the first N POSTs")
    parser.add_argument("--fail-status", type=int, default=503, help="status of injected faults (mode 'status')")
    parser.add_argument("--fail-mode", default="status",
                        choices=["status", "close", "invalid-json", "slow", "empty-choices", "huge", "huge-chunked"])
    parser.add_argument("--retry-after", default=None, help="Retry-After header value sent with injected statuses")
    parser.add_argument("--slow-ms", type=float, default=5000.0, help="delay of the 'slow' fault")
    parser.add_argument("--api-key", default=None, help="require this bearer key")
    parser.add_argument("--echo-auth", action="store_true",
                        help="quote the request's Authorization header in 401s and injected error bodies")
    parser.add_argument("--huge-bytes", type=int, default=50_000_000, help="text length of a 'huge' fault's reply")
    parser.add_argument("--model", default="loopback")
    parser.add_argument("--hang-after", type=int, default=None, help="answer N POSTs, then hang on every other")
    parser.add_argument("--model-path", default=None, help="weights named by GET /model_info (SGLang's route)")
    parser.add_argument("--sglang", action="store_true",
                        help="SGLang's matched_stop; prompts ending at an assistant header answered with a number")
    parser.add_argument("--props", type=json.loads, default=None, help="JSON answered by GET /props (llama-server)")
    parser.add_argument("--log-bodies", default=None, help="append each generation request's body to this file")
    args = parser.parse_args(argv)
    return ServerConfig(**vars(args))


def main(argv: list[str] | None = None) -> None:
    config = parse_args(argv)
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a core dependency off Windows
        runner = asyncio.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(serve(config))


class LoopbackServer:
    """Runs `tests/support/loopback_server.py` as a subprocess on a free 127.0.0.1 port.

    >>> with LoopbackServer("--latency-ms", "5") as server:
    ...     server.base_url  # http://127.0.0.1:<port>/v1
    """

    def __init__(self, *args: str, python: str = sys.executable, ready_timeout: float = 30.0) -> None:
        self.args = list(args)
        self.python = python
        self.ready_timeout = ready_timeout
        self.process: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def start(self) -> LoopbackServer:
        cmd = [self.python, str(Path(__file__).resolve()), "--port", "0", *self.args]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], self.ready_timeout)
        line = self.process.stdout.readline() if ready else ""
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"loopback server did not start ({' '.join(cmd)}): {line.strip() or 'no output'}")
        self.port = int(line.split()[1])
        return self

    def stats(self) -> dict[str, int]:
        """The server's request counters (GET /stats)."""
        with urllib.request.urlopen(f"{self.root_url}/stats", timeout=10) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    main()
