"""Requests decoded together: a decode loop over a causal LM with a shared, left-padded KV cache, on one thread.

Each row (one sample of one prompt) has its own sampling settings, stops, budget and `torch.Generator`, so a seeded
row draws the same tokens whatever else is in the batch. Prompts of one length are prefilled together without
padding, a prompt's samples share its prefill; finished rows leave at once, new requests join between decode steps.
"""

from __future__ import annotations

import hashlib
import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PREFILL_TOKENS = 8192  # prompt tokens per prefill forward (bounds the attention's memory)
PACKED_ROWS = range(2, 33)  # inputs of this many rows use the oneDNN-packed weights (a batch's decode step)


def pack_linears(model: Any) -> int:
    """Give every float32 CPU `nn.Linear` a oneDNN-packed copy of its weight for decode steps of `PACKED_ROWS` rows
    (an 8-row step 0.70-0.83x MKL's time: `benchmarks/bench_fast_paths.py --part packed`); one row and prefills keep
    the plain weight. Returns the bytes added; 0 where oneDNN is missing or differs from `F.linear` beyond float32
    rounding on a probe."""
    import torch

    ops: Any = getattr(torch.ops, "mkldnn", None)
    linears = [(parent, name, child) for parent in list(model.modules()) for name, child in parent.named_children()
               if type(child) is torch.nn.Linear and child.weight.dtype == torch.float32
               and child.weight.device.type == "cpu"]
    if not linears or not torch.backends.mkldnn.is_available() or not hasattr(ops, "_linear_pointwise"):
        return 0

    class PackedLinear(torch.nn.Module):
        def __init__(self, plain: Any) -> None:
            super().__init__()
            self.weight, self.bias = plain.weight, plain.bias  # the same parameters (a tied head stays tied)
            self.packed = ops._reorder_linear_weight(plain.weight.detach(), 8)

        def forward(self, x: Any) -> Any:
            if x.dim() == 3 and x.shape[1] == 1 and x.shape[0] in PACKED_ROWS:  # one token per row: a decode step
                return ops._linear_pointwise(x, self.packed, self.bias, "none", [], "")
            return torch.nn.functional.linear(x, self.weight, self.bias)  # what nn.Linear computes

    try:
        packed = [(parent, name, PackedLinear(child)) for parent, name, child in linears]
        probe = torch.randn(8, 1, linears[0][2].in_features, generator=torch.Generator().manual_seed(0))
        with torch.inference_mode():
            if not torch.allclose(packed[0][2](probe), linears[0][2](probe), rtol=1e-4, atol=1e-5):
                return 0
    except RuntimeError:  # an op this torch build lacks
        return 0
    for parent, name, module in packed:
        setattr(parent, name, module)
    return sum(m.packed.numel() * m.packed.element_size() for _, _, m in packed)


def growing_cache(config: Any) -> Any:
    """A `DynamicCache` whose layers append into spare room instead of `torch.cat` at every step; a layer whose
    tensors were replaced (rows dropped or joined) copies them into a new buffer at its next update."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        buffers: tuple[Any, ...] | None = None

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            import torch

            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            cached: tuple[Any, Any] = (self.keys, self.values)
            used, new = (cached[0].shape[-2] if cached[0].numel() else 0), key_states.shape[-2]
            buffers = self.buffers
            if buffers is None or buffers[0].shape[-2] < used + new or not all(
                    t.data_ptr() == b.data_ptr() and t.stride() == b.stride() and t.shape[:-2] == b.shape[:-2]
                    for t, b in zip(cached, buffers, strict=True)):  # no longer views of our buffers
                room = used + new + max(64, (used + new) // 4)
                buffers = self.buffers = tuple(
                    torch.empty((*s.shape[:-2], room, s.shape[-1]), dtype=s.dtype) for s in (key_states, value_states))
                for buffer, old in zip(buffers, cached, strict=True):
                    if used:
                        buffer[..., :used, :] = old
            out = []
            for buffer, states in zip(buffers, (key_states, value_states), strict=True):
                buffer[..., used:used + new, :] = states
                out.append(buffer[..., :used + new, :])
            self.keys, self.values = out
            return out[0], out[1]

    cache = DynamicCache(config=config)
    if all(type(layer) is DynamicLayer for layer in cache.layers):  # sliding windows etc. keep their own layers
        cache.layers = [GrowingLayer() for _ in cache.layers]
    return cache


@dataclass(frozen=True)
class SamplingParams:
    """How one prompt's rows are sampled and where they stop."""

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or less: no top-k
    stop_token_ids: frozenset[int] = frozenset()
    stop_strings: tuple[str, ...] = ()


def sample_seeds(seed: int | None, n: int) -> list[int]:
    """One generator seed per sample: the request's seed for sample 0 (so `n=1` and `n=k` agree on it), a hash of
    (seed, j) for sample j; no seed: fresh random seeds."""
    if seed is None:
        return [random.SystemRandom().getrandbits(63) for _ in range(n)]
    out = [seed % 2**64]
    for j in range(1, n):
        digest = hashlib.blake2b(f"{seed}\x1f{j}".encode(), digest_size=8).digest()
        out.append(int.from_bytes(digest, "little"))
    return out


def sample_token(logits: Any, params: SamplingParams, generator: Any) -> int:
    """The next token from one row's float32 logits: argmax at temperature 0, else temperature, top-k, top-p and
    a draw from the row's own generator."""
    import torch

    if params.temperature <= 0:
        return int(torch.argmax(logits))
    scores = logits / params.temperature
    if 0 < params.top_k < scores.shape[-1]:
        kth = torch.topk(scores, params.top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        ordered, order = torch.sort(scores, descending=True)
        cumulative = torch.softmax(ordered, dim=-1).cumsum(-1)
        drop = cumulative - torch.softmax(ordered, dim=-1) >= params.top_p  # keep the smallest set reaching top_p
        scores = scores.scatter(-1, order, ordered.masked_fill(drop, float("-inf")))
    probs = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


@dataclass
class Job:
    """One prompt of one request, `len(seeds)` rows; on the worker: `prepare()` (may set `prompt_ids`, `params`),
    then `on_done(token lists)` or `on_error(exc)`."""

    prompt_ids: list[int]
    params: SamplingParams
    seeds: list[int]
    decode: Callable[[list[int]], str]
    on_done: Callable[[list[list[int]]], None]
    on_error: Callable[[BaseException], None]
    prepare: Callable[[], None] | None = None
    outputs: list[list[int]] = field(default_factory=list)
    pending: int = 0
    settled: bool = False  # on_done or on_error has run

    def finish(self) -> None:
        """Hand the outputs over; an `on_done` that raises (e.g. in decoding) fails this job alone."""
        self.settled = True
        try:
            self.on_done(self.outputs)
        except Exception as exc:  # the request gets the error instead of no answer
            self.on_error(exc)

    def fail(self, exc: BaseException) -> None:
        if not self.settled:
            self.settled = True
            self.on_error(exc)


@dataclass
class Row:
    job: Job
    sample: int
    generator: Any
    position: int  # the position id of the next token fed
    tokens: list[int] = field(default_factory=list)


class DecodeBatch:
    """The rows being decoded and their shared KV cache (left-padded; `mask` marks the real columns)."""

    def __init__(self, model: Any) -> None:
        import inspect

        import torch

        self.torch, self.model = torch, model
        # transformers 5 renamed forward's `past_key_values` to `cache`
        self.cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        # left padding and merging assume plain growing layers (no sliding windows, no linear-attention states)
        self.pads_rows = all(type(layer) is DynamicLayer for layer in DynamicCache(config=model.config).layers)
        self.rows: list[Row] = []
        self.cache: Any = None
        self.mask: Any = None  # [rows, columns] long
        self.next_ids: Any = None  # [rows, 1]: the last sampled token of each row, fed at the next step

    def __len__(self) -> int:
        return len(self.rows)

    def admit(self, jobs: list[Job]) -> None:
        """Prefill the jobs' distinct prompts once each, copy their cache rows per sample, sample each row's first
        token and merge the rows into the batch."""
        torch = self.torch
        by_length: dict[int, list[tuple[int, ...]]] = {}
        for prompt in dict.fromkeys(tuple(job.prompt_ids) for job in jobs):
            by_length.setdefault(len(prompt), []).append(prompt)
        # Prompts of one length are prefilled together and never padded: a pad token costs what a real one does.
        groups = [g[i:i + max(1, PREFILL_TOKENS // n)] for n, g in by_length.items()
                  for i in range(0, len(g), max(1, PREFILL_TOKENS // n))]
        parts = [self._prefill(group) for group in groups]
        cache, mask = self._concat([(c, m) for c, m, _ in parts])
        logits = torch.cat([lg for _, _, lg in parts])
        where = {prompt: i for i, prompt in enumerate(p for g in groups for p in g)}
        rows: list[Row] = []
        picks: list[int] = []
        for job in jobs:
            job.outputs, job.pending = [[] for _ in job.seeds], len(job.seeds)
            for sample, seed in enumerate(job.seeds):
                rows.append(Row(job, sample, torch.Generator().manual_seed(seed), position=len(job.prompt_ids)))
                picks.append(where[tuple(job.prompt_ids)])
        if picks != list(range(len(where))):
            index = torch.tensor(picks)
            for layer in cache.layers:
                layer.keys, layer.values = layer.keys[index], layer.values[index]
            mask, logits = mask[index], logits[index]
        next_ids = self._sample(rows, logits)
        if self.rows:
            self.cache, self.mask = self._concat([(self.cache, self.mask), (cache, mask)])
            self.next_ids = torch.cat([self.next_ids, next_ids])
        else:
            self.cache, self.mask, self.next_ids = cache, mask, next_ids
        self.rows += rows
        self._retire()

    def _prefill(self, prompts: list[tuple[int, ...]]) -> tuple[Any, Any, Any]:
        """One forward over prompts of one length: their cache, mask (all real) and last-position logits."""
        torch = self.torch
        ids = torch.tensor(prompts)
        mask = torch.ones_like(ids)
        positions = torch.arange(ids.shape[1]).expand(len(prompts), -1)
        cache = growing_cache(self.model.config)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         logits_to_keep=1, **{self.cache_arg: cache})
        return cache, mask, out.logits[:, -1, :].float()

    def _concat(self, parts: list[tuple[Any, Any]]) -> tuple[Any, Any]:
        """Caches with their masks as one, rows in order: shorter ones left-padded with masked zero columns."""
        torch = self.torch
        if len(parts) == 1:
            return parts[0]
        width = max(m.shape[1] for _, m in parts)

        def pad(t: Any) -> Any:
            by = width - t.shape[-2]
            return torch.nn.functional.pad(t, (0, 0, by, 0)) if by else t

        first = parts[0][0]
        for i, layer in enumerate(first.layers):
            layer.keys = torch.cat([pad(c.layers[i].keys) for c, _ in parts])
            layer.values = torch.cat([pad(c.layers[i].values) for c, _ in parts])
        mask = torch.cat([torch.nn.functional.pad(m, (width - m.shape[1], 0)) for _, m in parts])
        return first, mask

    def step(self) -> None:
        """Feed every row its last token, sample the next one, retire finished rows."""
        torch = self.torch
        self.mask = torch.cat([self.mask, torch.ones(len(self.rows), 1, dtype=self.mask.dtype)], dim=1)
        positions = torch.tensor([[r.position] for r in self.rows])
        out = self.model(input_ids=self.next_ids, attention_mask=self.mask, position_ids=positions, use_cache=True,
                         **{self.cache_arg: self.cache})
        for r in self.rows:
            r.position += 1
        self.next_ids = self._sample(self.rows, out.logits[:, -1, :].float())
        self._retire()

    def _sample(self, rows: list[Row], logits: Any) -> Any:
        torch = self.torch
        greedy = torch.argmax(logits, dim=-1).tolist()
        chosen = [greedy[i] if r.job.params.temperature <= 0 else sample_token(logits[i], r.job.params, r.generator)
                  for i, r in enumerate(rows)]
        for r, tok in zip(rows, chosen, strict=True):
            r.tokens.append(tok)
        return torch.tensor(chosen).unsqueeze(1)

    def _finished(self, row: Row) -> bool:
        params, tokens = row.job.params, row.tokens
        if tokens[-1] in params.stop_token_ids or len(tokens) >= params.max_tokens:
            return True
        if params.stop_strings:
            window = max(map(len, params.stop_strings)) + 4  # a stop string of L characters spans <= L tokens
            tail = row.job.decode(tokens[-window:])
            return any(s in tail for s in params.stop_strings)
        return False

    def _retire(self) -> None:
        """Hand finished rows to their jobs and drop them (and no longer needed leading columns) from the cache."""
        done = [i for i, r in enumerate(self.rows) if self._finished(r)]
        if not done:
            return
        for i in done:
            row = self.rows[i]
            row.job.outputs[row.sample] = row.tokens
            row.job.pending -= 1
            if row.job.pending == 0:
                row.job.finish()
        keep = [i for i in range(len(self.rows)) if i not in set(done)]
        self.rows = [self.rows[i] for i in keep]
        if not self.rows:
            self.cache = self.mask = self.next_ids = None
            return
        index = self.torch.tensor(keep)
        mask = self.mask[index]
        first = int(mask.any(dim=0).int().argmax())  # the first column some remaining row attends to
        self.mask, self.next_ids = mask[:, first:], self.next_ids[index]
        for layer in self.cache.layers:
            layer.keys, layer.values = layer.keys[index, :, first:], layer.values[index, :, first:]

    def fail(self, exc: BaseException) -> None:
        """Report `exc` to every job in the batch and empty it."""
        for row in self.rows:
            row.job.fail(exc)
        self.rows, self.cache, self.mask, self.next_ids = [], None, None, None


class BatchWorker:
    """The thread that owns the model: gathers jobs (`window_s` after the first, up to `max_rows` rows), decodes
    them together, admits new ones between steps; packs the linears (`pack_linears`) at its first multi-row batch."""

    def __init__(self, model: Any, *, max_rows: int, window_s: float,
                 note: Callable[[str], None] = lambda _: None) -> None:
        self.batch = DecodeBatch(model)
        self.max_rows = max_rows if self.batch.pads_rows else 1  # else one request (its n samples) at a time
        self.model, self.note, self.packed = model, note, self.max_rows == 1  # one row at a time: nothing to pack
        self.window_s = window_s
        self.jobs: queue.Queue[Job] = queue.Queue()
        self._waiting: list[Job] = []
        self.thread = threading.Thread(target=self._run, name="cpu-engine-batch", daemon=True)
        self.thread.start()

    def submit(self, job: Job) -> None:
        self.jobs.put(job)

    def _take(self, block: bool) -> list[Job]:
        """Waiting jobs that fit in the free rows (a job bigger than the cap runs when the batch is empty)."""
        if block and not self._waiting:
            self._waiting.append(self.jobs.get())
            deadline = time.monotonic() + self.window_s
            while (left := deadline - time.monotonic()) > 0 and self._rows(self._waiting) < self.max_rows:
                try:
                    self._waiting.append(self.jobs.get(timeout=left))
                except queue.Empty:
                    break
        while True:
            try:
                self._waiting.append(self.jobs.get_nowait())
            except queue.Empty:
                break
        free = self.max_rows - len(self.batch)
        taken: list[Job] = []
        while self._waiting and (self._rows(taken) + len(self._waiting[0].seeds) <= free
                                 or (not taken and len(self.batch) == 0)):
            job = self._waiting.pop(0)
            try:
                if job.prepare is not None:
                    job.prepare()
            except Exception as exc:  # a bad request (prompt too long, ...) fails alone
                job.fail(exc)
                continue
            taken.append(job)
        return taken

    def _pack(self) -> None:
        started = time.monotonic()
        added = pack_linears(self.model)
        self.packed = True
        if added:
            self.note(f"packed the linear layers for batched steps in {time.monotonic() - started:.1f}s "
                      f"(+{added / 1e6:.0f} MB)")

    @staticmethod
    def _rows(jobs: list[Job]) -> int:
        return sum(len(j.seeds) for j in jobs)

    def _run(self) -> None:
        import torch

        with torch.inference_mode():
            while True:
                jobs = self._take(block=len(self.batch) == 0)
                try:
                    if jobs and not self.packed and len(self.batch) + self._rows(jobs) > 1:
                        self._pack()
                    if jobs:
                        self.batch.admit(jobs)
                    if len(self.batch):
                        self.batch.step()
                except Exception as exc:  # a failed forward fails the requests in it, not the server
                    for job in jobs:
                        job.fail(exc)
                    self.batch.fail(exc)
