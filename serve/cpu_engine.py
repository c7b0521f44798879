"""The embedded CPU engine: an OpenAI-compatible server around a `transformers` causal LM (no GPU needed).

Routes: /health, /health_generate, /v1/models, /v1/completions and /v1/chat/completions (stop strings and token ids,
n, seed, top_p, top_k; finish_reason, matched_stop and usage like SGLang). Requests that arrive together are decoded
together on one worker thread (`serve.cpu_batching`). A GGUF `--model` (a path or `pkg:PACKAGE/file.gguf`) is
dequantised once and cached (`serve.gguf_model_cache`), its tokenizer taken from its metadata.
Run: `python -m userturn.serve.cpu_engine --model PATH_OR_HUB_ID --port 8000` (extra: `pip install 'userturn[cpu]'`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from userturn.core.errors import UserError, first_error
from userturn.core.packaged import is_gguf
from userturn.serve.cpu_batching import BatchWorker, Job, SamplingParams, sample_seeds
from userturn.serve.cpu_threads import default_threads

DEFAULT_MAX_TOKENS = 256
DEFAULT_MAX_BATCH = 16  # rows decoded together (a request's n samples are n rows)
DEFAULT_BATCH_WINDOW_MS = 10.0  # how long an idle engine waits for more requests after the first
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")


class EngineConfig(BaseModel):
    """What `python -m userturn.serve.cpu_engine` was started with."""

    model: str
    tokenizer: str | None = None
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    dtype: str = "auto"
    seed: int | None = None
    context_length: int | None = None
    chat_template: str | None = None
    trust_remote_code: bool = False
    revision: str | None = None
    threads: int | None = None
    max_batch: int = Field(default=DEFAULT_MAX_BATCH, ge=1)
    batch_window_ms: float = Field(default=DEFAULT_BATCH_WINDOW_MS, ge=0)

    @property
    def name(self) -> str:
        return self.served_model_name or self.model


class SamplingRequest(BaseModel):
    """The sampling fields shared by both completion routes (unknown OpenAI fields are ignored)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1)
    n: int = Field(default=1, ge=1, le=64)
    seed: int | None = None
    stop: list[str] = Field(default_factory=list)
    stop_token_ids: list[int] = Field(default_factory=list)
    skip_special_tokens: bool = True
    ignore_eos: bool = False
    stream: bool = False

    @model_validator(mode="before")
    @classmethod
    def _nulls_mean_defaults(cls, data: Any) -> Any:
        """OpenAI clients send explicit nulls for unset fields: treat them as absent."""
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_list(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("stop")
    @classmethod
    def _non_empty_stops(cls, v: list[str]) -> list[str]:
        return [s for s in v if s]


class CompletionRequest(SamplingRequest):
    prompt: str | list[str]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | None = None


class ChatRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)


@dataclass
class Sequence:
    """One generated continuation after stop handling."""

    text: str
    finish_reason: str
    matched_stop: str | int | None
    completion_tokens: int


def finish_sequence(
    token_ids: list[int],
    *,
    stop_token_ids: set[int],
    stop_strings: list[str],
    max_tokens: int,
    decode: Any,
) -> Sequence:
    """Cut a generated token list at the first stop token, then at the earliest stop string (both excluded)."""
    ids, used = token_ids, len(token_ids)
    matched: str | int | None = None
    reason: str | None = None
    for i, tok in enumerate(ids):
        if tok in stop_token_ids:
            matched, reason, ids, used = tok, "stop", ids[:i], i + 1
            break
    text = decode(ids)
    hits = [(text.find(s), s) for s in stop_strings if s in text]
    if hits:
        pos, stop = min(hits)
        text, matched, reason = text[:pos], stop, "stop"
    if reason is None:
        reason = "length" if used >= max_tokens else "stop"
    return Sequence(text=text, finish_reason=reason, matched_stop=matched, completion_tokens=used)


class ApiError(Exception):
    def __init__(self, status: int, message: str, code: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


class Generator:
    """Holds the model and tokenizer; a `BatchWorker` thread tokenizes, decodes the batches and detokenizes."""

    def __init__(self, cfg: EngineConfig) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(cfg.threads or default_threads())
        self.cfg = cfg
        self.notes: list[str] = []  # what the log should say about the load
        dtype = {"auto": torch.float32, "half": torch.float16, "float16": torch.float16,
                 "bfloat16": torch.bfloat16, "float": torch.float32, "float32": torch.float32}[cfg.dtype]
        kw: dict[str, Any] = {"trust_remote_code": cfg.trust_remote_code, "revision": cfg.revision}
        model: Any = None  # a GGUF's, loaded from its converted folder
        tokenizer_source = cfg.tokenizer or cfg.model
        if is_gguf(cfg.model):
            from userturn.core.gguf_tokenizer import gguf_file, gguf_tokenizer_dir
            from userturn.serve.gguf_model_cache import cached_model, folder_size

            path = gguf_file(cfg.model)
            if cfg.tokenizer is None:  # the converted tokenizer the renderer reads too: prompts tokenize alike
                tokenizer_source = str(gguf_tokenizer_dir(cfg.model))
            started = time.monotonic()
            print(f"cpu_engine: preparing {path.name}: from the cache, else converted once (about 30 s on 2 cores)",
                  flush=True)
            model, converted, hit = cached_model(path, dtype, str(dtype))
            size = f"{folder_size(converted) / 1e6:.0f} MB"
            self.notes.append(f"converted model from cache {converted} ({size})" if hit else
                              f"converted {path.name} in {time.monotonic() - started:.1f}s, cached at {converted} "
                              f"({size})")
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_source, **kw)
        if cfg.chat_template:
            self.tokenizer.chat_template = Path(cfg.chat_template).read_text(encoding="utf-8")
        self.model = model if model is not None else AutoModelForCausalLM.from_pretrained(
            cfg.model, dtype=dtype, **kw).eval()
        gen_eos = self.model.generation_config.eos_token_id
        eos = [gen_eos] if isinstance(gen_eos, int) else list(gen_eos or [])
        if self.tokenizer.eos_token_id is not None:
            eos.append(self.tokenizer.eos_token_id)
        self.eos_ids: list[int] = sorted(set(eos))
        limit = getattr(self.model.config, "max_position_embeddings", None)
        self.context_length: int | None = cfg.context_length or limit
        self.worker = BatchWorker(self.model, max_rows=cfg.max_batch, window_s=cfg.batch_window_ms / 1000,
                                  note=lambda msg: print(f"cpu_engine: {msg}", flush=True))

    def _max_tokens(self, req: SamplingRequest, prompt_len: int) -> int:
        wanted = req.max_tokens or req.max_completion_tokens
        if self.context_length is not None:
            room = self.context_length - prompt_len
            if wanted is not None and wanted > room:
                raise ApiError(400, f"prompt ({prompt_len} tokens) + max_tokens ({wanted}) exceeds the context "
                               f"length ({self.context_length})")
            if room < 1:
                raise ApiError(400, f"prompt ({prompt_len} tokens) fills the context length ({self.context_length})")
            return wanted or min(DEFAULT_MAX_TOKENS, room)
        return wanted or DEFAULT_MAX_TOKENS

    def job(self, prompt: str, req: SamplingRequest, done: Callable[[list[Sequence], int], None],
            error: Callable[[BaseException], None]) -> Job:
        """The batch job for `prompt`: tokenized, checked and finished (stops cut, text decoded) on the worker."""
        def decode(ids: list[int]) -> str:
            return str(self.tokenizer.decode(ids, skip_special_tokens=req.skip_special_tokens))

        def prepare() -> None:
            job.prompt_ids = list(self.tokenizer(prompt)["input_ids"])
            stop_ids = set() if req.ignore_eos else set(self.eos_ids)
            stop_ids |= set(req.stop_token_ids)
            top_k = req.top_k if req.top_k and req.top_k > 0 else 0  # SGLang/vLLM: -1 (or unset) = no top-k
            job.params = SamplingParams(
                max_tokens=self._max_tokens(req, len(job.prompt_ids)), temperature=req.temperature,
                top_p=req.top_p, top_k=top_k, stop_token_ids=frozenset(stop_ids), stop_strings=tuple(req.stop))

        def finish(outputs: list[list[int]]) -> None:
            seqs = [finish_sequence(ids, stop_token_ids=set(job.params.stop_token_ids), stop_strings=req.stop,
                                    max_tokens=job.params.max_tokens, decode=decode)
                    for ids in outputs]
            done(seqs, len(job.prompt_ids))

        job = Job(prompt_ids=[], params=SamplingParams(max_tokens=1), seeds=sample_seeds(
            req.seed if req.seed is not None else self.cfg.seed, req.n), decode=decode, on_done=finish,
            on_error=error, prepare=prepare)
        return job

    async def run(self, prompt: str, req: SamplingRequest) -> tuple[list[Sequence], int]:
        """n continuations of `prompt` with the request's sampling and stops (decoded with whatever else runs)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[list[Sequence], int]] = loop.create_future()

        def settle(result: Any, exc: BaseException | None) -> None:
            if not future.done():
                future.set_exception(exc) if exc is not None else future.set_result(result)

        def done(seqs: list[Sequence], n_prompt: int) -> None:
            loop.call_soon_threadsafe(settle, (seqs, n_prompt), None)

        def error(exc: BaseException) -> None:
            loop.call_soon_threadsafe(settle, None, exc)

        self.worker.submit(self.job(prompt, req, done=done, error=error))
        return await future

    def render_chat(self, req: ChatRequest) -> str:
        messages = [m.model_dump(exclude_none=True) for m in req.messages]
        try:
            return str(self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, **req.chat_template_kwargs
            ))
        except Exception as exc:  # template errors are the client's input problem
            raise ApiError(400, f"chat template failed: {exc}") from None


def response_body(kind: str, model: str, results: list[tuple[list[Sequence], int]], n: int) -> dict[str, Any]:
    """The OpenAI response (`kind` "text_completion" or "chat.completion") for each prompt's (sequences, prompt
    tokens); choice `p * n + j` is sample j of prompt p."""
    choices = [{"index": p * n + j, **({"text": s.text} if kind == "text_completion" else
                                       {"message": {"role": "assistant", "content": s.text}}),
                "logprobs": None, "finish_reason": s.finish_reason, "matched_stop": s.matched_stop}
               for p, (seqs, _) in enumerate(results) for j, s in enumerate(seqs)]
    prompt = sum(n_prompt for _, n_prompt in results)
    completion = sum(s.completion_tokens for seqs, _ in results for s in seqs)
    return {"id": f"{'cmpl' if kind == 'text_completion' else 'chatcmpl'}-{uuid.uuid4().hex}", "object": kind,
            "created": int(time.time()), "model": model, "choices": choices,
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}}


def build_app(gen: Generator) -> web.Application:
    """The aiohttp application serving `gen`."""
    cfg = gen.cfg

    async def parse(request: web.Request, model: type[SamplingRequest]) -> Any:
        try:
            body = await request.json()
        except Exception:
            raise ApiError(400, "request body is not valid JSON") from None
        try:
            req = model.model_validate(body)
        except ValidationError as exc:
            raise ApiError(400, first_error(exc)) from None
        if req.stream:
            raise ApiError(400, "stream=true is not supported by the CPU engine")
        if req.model not in (None, "", cfg.name, cfg.model):
            raise ApiError(404, f"model '{req.model}' is not served here (this server serves '{cfg.name}')",
                           "model_not_found")
        return req

    @web.middleware
    async def errors(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            error = {"message": exc.message, "type": exc.code, "code": exc.status}
            return web.json_response({"object": "error", "error": error, "message": exc.message}, status=exc.status)

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def health_generate(_: web.Request) -> web.Response:
        await gen.run("ping", SamplingRequest(max_tokens=1, temperature=0))
        return web.json_response({"status": "ok"})

    async def models(_: web.Request) -> web.Response:
        card = {"id": cfg.name, "object": "model", "created": 0, "owned_by": "userturn", "root": cfg.model,
                "max_model_len": gen.context_length}
        return web.json_response({"object": "list", "data": [card]})

    async def completions(request: web.Request) -> web.Response:
        req: CompletionRequest = await parse(request, CompletionRequest)
        prompts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
        results = await asyncio.gather(*(gen.run(prompt, req) for prompt in prompts))  # decoded together
        return web.json_response(response_body("text_completion", cfg.name, list(results), req.n))

    async def chat(request: web.Request) -> web.Response:
        req: ChatRequest = await parse(request, ChatRequest)
        result = await gen.run(gen.render_chat(req), req)
        return web.json_response(response_body("chat.completion", cfg.name, [result], req.n))

    app = web.Application(middlewares=[errors], client_max_size=64 * 1024 * 1024)
    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health_generate)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    return app


def parse_args(argv: list[str] | None = None) -> EngineConfig:
    p = argparse.ArgumentParser(allow_abbrev=False,
                                prog="python -m userturn.serve.cpu_engine", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="model path, hub id, or GGUF file (path or pkg:PACKAGE/file.gguf)")
    p.add_argument("--tokenizer")
    p.add_argument("--served-model-name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--dtype", choices=DTYPES, default="auto", help="auto = float32 on CPU")
    p.add_argument("--seed", type=int, help="default seed for requests that send none")
    p.add_argument("--context-length", type=int)
    p.add_argument("--chat-template", help="Jinja file overriding the tokenizer's chat template")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--revision")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: half the usable CPUs, 1 to 8)")
    p.add_argument("--max-batch", type=int, help=f"rows decoded together (default {DEFAULT_MAX_BATCH})")
    p.add_argument("--batch-window-ms", type=float,
                   help=f"an idle engine gathers requests this long (default {DEFAULT_BATCH_WINDOW_MS:g})")
    a = p.parse_args(argv)
    if a.max_batch is not None and a.max_batch < 1:
        p.error(f"argument --max-batch: must be at least 1, got {a.max_batch}")
    if a.batch_window_ms is not None and not 0 <= a.batch_window_ms < float("inf"):
        p.error(f"argument --batch-window-ms: must be a finite number >= 0, got {a.batch_window_ms}")
    return EngineConfig(**{k: v for k, v in vars(a).items() if v is not None})


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    started = time.monotonic()
    print(f"cpu_engine: loading {cfg.model} ...", flush=True)
    try:
        gen = Generator(cfg)
    except (OSError, ValueError, UserError) as exc:
        print(f"cpu_engine: error: cannot load model {cfg.model}: {exc}", file=sys.stderr, flush=True)
        return 1
    for note in gen.notes:
        print(f"cpu_engine: {note}", flush=True)
    print(f"cpu_engine: loaded in {time.monotonic() - started:.1f}s ({gen.worker.batch.torch.get_num_threads()} "
          f"threads, batches of up to {gen.worker.max_rows} rows)", flush=True)
    app = build_app(gen)
    try:
        web.run_app(app, host=cfg.host, port=cfg.port, access_log=None, handle_signals=True, shutdown_timeout=1,
                    print=lambda _msg: print(f"cpu_engine: serving on http://{cfg.host}:{cfg.port}", flush=True))
    except OSError as exc:
        print(f"cpu_engine: error: cannot listen on {cfg.host}:{cfg.port}: {exc.strerror}", file=sys.stderr,
              flush=True)
        return 1
    print("cpu_engine: stopped", flush=True)
    sys.stderr.flush()
    os._exit(0)  # nothing left to save; skips torch's slow interpreter teardown (seconds on a small CPU)


if __name__ == "__main__":
    raise SystemExit(main())
