"""The engine's decode loop, in process on the tiny model: greedy equals `generate`, a row's text does not depend
on its batch, per-row stops and budgets, shared prompts prefilled once, the worker thread's admission, the
oneDNN-packed linear layers of batched steps."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from userturn.serve.cpu_batching import (
    BatchWorker,
    DecodeBatch,
    Job,
    SamplingParams,
    pack_linears,
    sample_seeds,
    sample_token,
)

TEXTS = ["<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4.<|im_end|>\n<|im_start|>user\n",
         "hello", "the apples cost three dollars each, how many can I buy with ten", "why"]


@pytest.fixture(scope="module")
def lm(tiny_model_dir: Path) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval(), AutoTokenizer.from_pretrained(tiny_model_dir)


def make_job(tok: Any, text: str, params: SamplingParams, seeds: list[int], out: dict[int, Any], key: int) -> Job:
    return Job(prompt_ids=tok(text)["input_ids"], params=params, seeds=seeds, decode=tok.decode,
               on_done=lambda outputs: out.__setitem__(key, outputs), on_error=lambda exc: out.__setitem__(key, exc))


def decode_all(lm: tuple[Any, Any], specs: list[tuple[str, SamplingParams, list[int]]]) -> list[list[list[int]]]:
    """Token lists per job and sample, the jobs admitted together and decoded to the end."""
    import torch

    model, tok = lm
    batch = DecodeBatch(model)
    out: dict[int, Any] = {}
    with torch.inference_mode():
        batch.admit([make_job(tok, text, params, seeds, out, k) for k, (text, params, seeds) in enumerate(specs)])
        while len(batch):
            batch.step()
    return [out[k] for k in range(len(specs))]


GREEDY = SamplingParams(max_tokens=12)
SAMPLED = SamplingParams(max_tokens=12, temperature=1.0, top_p=0.9, top_k=40)


def test_greedy_loop_matches_generate(lm: tuple[Any, Any]) -> None:
    import torch

    model, tok = lm
    for text in TEXTS:
        ids = tok(text, return_tensors="pt")
        with torch.inference_mode():
            ref = model.generate(**ids, max_new_tokens=12, do_sample=False, eos_token_id=None)
        assert decode_all(lm, [(text, GREEDY, [0])]) == [[ref[0, ids["input_ids"].shape[1]:].tolist()]]


def test_a_rows_text_does_not_depend_on_its_batch(lm: tuple[Any, Any]) -> None:
    specs = [(TEXTS[i % 4], SAMPLED if i % 2 else GREEDY, [100 + i]) for i in range(8)]
    alone = [decode_all(lm, [spec])[0] for spec in specs]
    together = decode_all(lm, specs)
    assert together == alone
    reordered = decode_all(lm, specs[::-1])
    assert reordered == alone[::-1]
    sampled = [a[0] for a, (_, params, _) in zip(alone, specs, strict=True) if params is SAMPLED]
    assert len({tuple(s) for s in sampled}) == len(sampled), "the seeds draw different samples"


def test_stops_and_budgets_per_row_in_a_mixed_batch(lm: tuple[Any, Any]) -> None:
    _, tok = lm
    [[full]] = decode_all(lm, [(TEXTS[0], GREEDY, [0])])
    stop_token = full[4]
    first = full.index(stop_token)  # the stop token may already come earlier
    stop_text = tok.decode(full[6:8])
    specs = [(TEXTS[0], SamplingParams(max_tokens=3), [0]),
             (TEXTS[0], SamplingParams(max_tokens=12, stop_token_ids=frozenset({stop_token})), [0]),
             (TEXTS[0], SamplingParams(max_tokens=12, stop_strings=(stop_text,)), [0]),
             (TEXTS[0], GREEDY, [0]), (TEXTS[1], SamplingParams(max_tokens=5), [0])]
    short, by_token, by_text, whole, other = (r[0] for r in decode_all(lm, specs))
    assert short == full[:3]
    assert by_token == full[:first + 1], "the stop token ends the row (the engine cuts it from the text)"
    assert stop_text in tok.decode(by_text) and stop_text not in tok.decode(by_text[:-1])
    assert by_text == full[:len(by_text)]
    assert whole == full and len(other) == 5


def test_samples_of_one_prompt_are_prefilled_once(lm: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    prefilled: list[int] = []
    original = DecodeBatch._prefill

    def counting(self: DecodeBatch, prompts: list[tuple[int, ...]]) -> Any:
        prefilled.extend(len(p) for p in prompts)
        return original(self, prompts)

    specs = [(TEXTS[0], SAMPLED, [7 + k]) for k in range(4)] + [(TEXTS[2], SAMPLED, [1, 2, 3])]
    alone = [decode_all(lm, [spec])[0] for spec in specs]
    monkeypatch.setattr(DecodeBatch, "_prefill", counting)
    together = decode_all(lm, specs)
    assert len(prefilled) == 2, "one prefill per distinct prompt, not per sample"
    assert together == alone
    assert len({tuple(s) for s in together[4]}) == 3, "n samples each draw with their own generator"


def test_sample_seeds() -> None:
    assert sample_seeds(5, 1) == [5] and sample_seeds(5, 3)[0] == 5, "sample 0 is the request's seed"
    assert sample_seeds(5, 3) == sample_seeds(5, 3) and len(set(sample_seeds(5, 3))) == 3
    assert sample_seeds(-1, 1) == [2**64 - 1]
    assert sample_seeds(None, 2) != sample_seeds(None, 2)


def test_sample_token_filters() -> None:
    import torch

    logits = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4]))
    gen = torch.Generator().manual_seed(0)
    assert sample_token(logits, SamplingParams(max_tokens=1), gen) == 3
    assert sample_token(logits, SamplingParams(max_tokens=1, temperature=1.0, top_k=1), gen) == 3
    # top_p=0.5: 0.4 is kept (nothing before it), 0.3 is kept (0.4 before it < 0.5), 0.2 is not (0.7 >= 0.5)
    top_p = {sample_token(logits, SamplingParams(max_tokens=1, temperature=1.0, top_p=0.5), gen) for _ in range(200)}
    assert top_p == {2, 3}
    top_k = {sample_token(logits, SamplingParams(max_tokens=1, temperature=1.0, top_k=2), gen) for _ in range(200)}
    assert top_k == {2, 3}
    plain = {sample_token(logits, SamplingParams(max_tokens=1, temperature=1.0), gen) for _ in range(200)}
    assert plain == {0, 1, 2, 3}


def test_worker_admits_arrivals_into_a_running_batch(lm: tuple[Any, Any]) -> None:
    model, tok = lm
    long = SamplingParams(max_tokens=40)
    expected = [decode_all(lm, [(TEXTS[0], long, [0])])[0], decode_all(lm, [(TEXTS[2], SAMPLED, [3, 4])])[0]]
    worker = BatchWorker(model, max_rows=4, window_s=0.0)
    out: dict[int, Any] = {}
    finished = threading.Event()
    first = make_job(tok, TEXTS[0], long, [0], out, 0)
    seen_rows: list[int] = []
    original_step = worker.batch.step

    def step() -> None:
        seen_rows.append(len(worker.batch))
        if len(seen_rows) == 3:  # the first job is running: the next ones arrive now
            worker.submit(make_job(tok, TEXTS[2], SAMPLED, [3, 4], out, 1))
            bad = make_job(tok, TEXTS[1], GREEDY, [0], out, 2)
            bad.prepare = lambda: (_ for _ in ()).throw(ValueError("prompt too long"))
            worker.submit(bad)
        original_step()
        if len(out) == 3:
            finished.set()

    worker.batch.step = step  # type: ignore[method-assign]
    worker.submit(first)
    assert finished.wait(timeout=60)
    assert [out[0], out[1]] == expected
    assert isinstance(out[2], ValueError), "a bad request fails alone"
    assert max(seen_rows) == 3 and seen_rows[0] == 1, "the later job joined the running one"


def test_packed_linears_keep_one_row_exact_and_a_row_independent_of_its_batch(tiny_model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch build has no oneDNN")
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    weights = sum(m.weight.numel() * 4 for m in linears)
    added = pack_linears(model)
    assert added >= weights > 0, "every linear layer got a packed float32 copy"
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    assert pack_linears(model) == 0, "packing twice packs nothing more"
    assert pack_linears(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)) == 0
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids = tok(TEXTS[0], return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        one_row = [m(ids[:, -1:]).logits for m in (plain, model)]
        eight_rows = [m(ids[:, -8:].T).logits for m in (plain, model)]  # 8 sequences of one token
    assert torch.equal(*one_row), "one row takes the plain weight"
    torch.testing.assert_close(*eight_rows, rtol=1e-4, atol=1e-5)
    head, x = model.lm_head, torch.randn(8, 1, model.lm_head.weight.shape[1])
    with torch.inference_mode():
        assert torch.equal(head(x), torch.ops.mkldnn._linear_pointwise(x, head.packed, None, "none", [], "")), \
            "8 rows take the packed weight"
        assert torch.equal(head(x[:1]), torch.nn.functional.linear(x[:1], head.weight))
    specs = [(TEXTS[i % 4], SAMPLED if i % 2 else GREEDY, [100 + i]) for i in range(8)]
    packed_lm = (model, tok)
    alone = [decode_all((plain, tok), [spec])[0] for spec in specs]
    assert decode_all(packed_lm, specs) == alone == [decode_all(packed_lm, [spec])[0] for spec in specs]


def test_worker_packs_the_linear_layers_at_its_first_batch_of_two_rows(tiny_model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch build has no oneDNN")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    notes: list[str] = []
    worker = BatchWorker(model, max_rows=4, window_s=0.0, note=notes.append)

    def run(seeds: list[int]) -> None:
        done = threading.Event()
        job = make_job(tok, TEXTS[1], SamplingParams(max_tokens=3), seeds, {}, 0)
        job.on_done = lambda _: done.set()
        worker.submit(job)
        assert done.wait(timeout=60)

    run([1])
    assert notes == [] and any(type(m) is torch.nn.Linear for m in model.modules()), "one row: nothing packed"
    run([1, 2])
    run([1, 2])
    assert len(notes) == 1 and notes[0].startswith("packed the linear layers for batched steps in ")
    assert not any(type(m) is torch.nn.Linear for m in model.modules())


def test_a_job_whose_on_done_raises_fails_alone(lm: tuple[Any, Any]) -> None:
    """A job whose completion callback raises (say, in decoding) gets that error; its batch mates still finish."""
    import torch

    model, tok = lm
    out: dict[int, Any] = {}

    def broken(outputs: list[list[int]]) -> None:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    bad = Job(prompt_ids=tok(TEXTS[0])["input_ids"], params=GREEDY, seeds=[1], decode=tok.decode, on_done=broken,
              on_error=lambda exc: out.__setitem__(0, exc))
    batch = DecodeBatch(model)
    with torch.inference_mode():
        batch.admit([bad, make_job(tok, TEXTS[1], GREEDY, [1], out, 1)])
        while len(batch):
            batch.step()
    assert isinstance(out[0], UnicodeDecodeError)
    assert isinstance(out[1], list) and len(out[1]) == 1 and out[1][0]
