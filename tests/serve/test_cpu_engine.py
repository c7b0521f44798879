"""The embedded CPU engine: stop handling (unit) and the real HTTP server process (session fixture)."""

from __future__ import annotations

import httpx
import pytest

from userturn.serve.cpu_engine import CompletionRequest, default_threads, finish_sequence, parse_args

VOCAB = {1: "he", 2: "llo", 3: " wor", 4: "ld", 5: "!", 9: "<eos>", 0: "<pad>"}


def decode(ids: list[int]) -> str:
    return "".join(VOCAB[i] for i in ids)


def finish(ids: list[int], stops: list[str] | None = None, stop_ids: set[int] | None = None, max_tokens: int = 10):
    return finish_sequence(ids, stop_token_ids=stop_ids if stop_ids is not None else {9},
                           stop_strings=stops or [], max_tokens=max_tokens, decode=decode)


def test_stop_token_is_excluded_and_reported() -> None:
    s = finish([1, 2, 9, 0, 0])
    assert (s.text, s.finish_reason, s.matched_stop, s.completion_tokens) == ("hello", "stop", 9, 3)


def test_earliest_stop_string_wins_and_is_cut() -> None:
    s = finish([1, 2, 3, 4, 5], stops=["!", "wor"])
    assert (s.text, s.finish_reason, s.matched_stop) == ("hello ", "stop", "wor")


def test_stop_string_inside_a_token() -> None:
    s = finish([1, 2, 3], stops=["ll"])
    assert (s.text, s.matched_stop, s.completion_tokens) == ("he", "ll", 3)


def test_length_when_budget_used() -> None:
    s = finish([1, 2, 3], max_tokens=3)
    assert (s.text, s.finish_reason, s.matched_stop) == ("hello wor", "length", None)


def test_stop_string_before_stop_token() -> None:
    s = finish([1, 2, 5, 9], stops=["llo"])
    assert (s.text, s.matched_stop, s.finish_reason) == ("he", "llo", "stop")


def test_request_validation() -> None:
    r = CompletionRequest.model_validate({"prompt": "x", "stop": "a", "logprobs": None, "echo": False})
    assert r.stop == ["a"] and r.temperature == 1.0 and r.n == 1
    assert CompletionRequest.model_validate({"prompt": "x", "stop": None}).stop == []
    assert CompletionRequest.model_validate({"prompt": "x", "stop": ["", "b"]}).stop == ["b"]
    nulls = CompletionRequest.model_validate({"prompt": "x", "temperature": None, "top_p": None, "n": None,
                                              "seed": None, "max_tokens": None})
    assert (nulls.temperature, nulls.top_p, nulls.n, nulls.seed, nulls.max_tokens) == (1.0, 1.0, 1, None, None)


def test_batching_flags_and_defaults() -> None:
    cfg = parse_args(["--model", "m", "--max-batch", "4", "--batch-window-ms", "0"])
    assert (cfg.max_batch, cfg.batch_window_ms, cfg.threads) == (4, 0.0, None)
    defaults = parse_args(["--model", "m"])
    assert (defaults.max_batch, defaults.batch_window_ms) == (16, 10.0)
    assert 1 <= default_threads() <= 8


def test_bad_batching_flags_are_one_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(["--model", "m", "--max-batch", "0"])
    assert exc.value.code == 2 and "--max-batch: must be at least 1, got 0" in capsys.readouterr().err


# ----- against the real process -----

USER_HEADER_PROMPT = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4.<|im_end|>\n<|im_start|>user\n"


@pytest.fixture(scope="module")
def client(cpu_engine_server) -> httpx.Client:
    with httpx.Client(base_url=cpu_engine_server.base_url, timeout=60, trust_env=False) as c:
        yield c


def complete(client: httpx.Client, **body) -> dict:
    r = client.post("/completions", json={"model": "tiny", **body})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.slow
def test_raw_completion_at_user_header_returns_text(client: httpx.Client) -> None:
    data = complete(client, prompt=USER_HEADER_PROMPT, max_tokens=8, temperature=0)
    assert data["object"] == "text_completion" and data["model"] == "tiny"
    (choice,) = data["choices"]
    assert isinstance(choice["text"], str) and choice["text"]
    assert choice["finish_reason"] == "length" and choice["matched_stop"] is None
    assert data["usage"]["completion_tokens"] == 8 and data["usage"]["prompt_tokens"] > 10


@pytest.mark.slow
def test_stop_string_cuts_the_greedy_output(client: httpx.Client) -> None:
    full = complete(client, prompt=USER_HEADER_PROMPT, max_tokens=16, temperature=0)["choices"][0]["text"]
    stop = next(full[i:i + 2] for i in range(2, len(full) - 1) if "\ufffd" not in full[i:i + 2])
    cut = complete(client, prompt=USER_HEADER_PROMPT, max_tokens=16, temperature=0, stop=[stop])["choices"][0]
    assert cut["text"] == full[: full.index(stop)]
    assert cut["finish_reason"] == "stop" and cut["matched_stop"] == stop


@pytest.mark.slow
def test_seed_n_and_temperature(client: httpx.Client) -> None:
    body = {"prompt": USER_HEADER_PROMPT, "max_tokens": 8, "temperature": 1.0, "n": 3}
    a = complete(client, seed=11, **body)
    b = complete(client, seed=11, **body)
    c = complete(client, seed=12, **body)
    texts = lambda d: [ch["text"] for ch in d["choices"]]  # noqa: E731
    assert [ch["index"] for ch in a["choices"]] == [0, 1, 2]
    assert texts(a) == texts(b), "same seed, same samples"
    assert texts(a) != texts(c), "another seed, other samples"
    assert len(set(texts(a))) > 1, "n samples differ at temperature 1"
    assert a["usage"]["completion_tokens"] == 24


@pytest.mark.slow
def test_chat_completion(client: httpx.Client) -> None:
    r = client.post("/chat/completions", json={
        "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0,
        "chat_template_kwargs": {"enable_thinking": False}})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["object"] == "chat.completion"
    assert data["choices"][0]["message"]["role"] == "assistant"
    assert data["usage"]["completion_tokens"] == 4


@pytest.mark.slow
def test_routes_and_errors(client: httpx.Client, cpu_engine_server) -> None:
    root = cpu_engine_server.base_url.removesuffix("/v1")
    assert httpx.get(root + "/health", trust_env=False).json() == {"status": "ok"}
    assert httpx.get(root + "/health_generate", trust_env=False, timeout=60).status_code == 200
    models = client.get("/models").json()["data"]
    assert models[0]["id"] == "tiny" and models[0]["max_model_len"] == 4096
    wrong = client.post("/completions", json={"model": "other", "prompt": "x"})
    assert wrong.status_code == 404 and "not served here" in wrong.json()["error"]["message"]
    assert client.post("/completions", json={"prompt": "x", "stream": True}).status_code == 400
    too_long = client.post("/completions", json={"prompt": "x", "max_tokens": 10**6})
    assert too_long.status_code == 400 and "context length" in too_long.json()["error"]["message"]
    assert client.post("/completions", content=b"{not json").status_code == 400
    bad = client.post("/completions", json={"prompt": "x", "n": 0})
    assert bad.status_code == 400 and bad.json()["error"]["message"].startswith("n:")


def concurrently(client: httpx.Client, bodies: list[dict]) -> list[dict]:
    """The bodies sent at once (the engine gathers them into one batch); responses in order."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda body: complete(client, **body), bodies))


OTHER_PROMPTS = ["hello", "the apples cost three dollars each", "why", "<|im_start|>assistant\nsure"]


@pytest.mark.slow
def test_seeded_and_greedy_requests_give_the_same_text_alone_and_in_a_batch_of_8(client: httpx.Client) -> None:
    seeded = {"prompt": USER_HEADER_PROMPT, "max_tokens": 12, "temperature": 1.0, "top_p": 0.95, "seed": 5}
    greedy = {"prompt": USER_HEADER_PROMPT, "max_tokens": 12, "temperature": 0}
    alone = [complete(client, **seeded)["choices"][0]["text"], complete(client, **greedy)["choices"][0]["text"]]
    neighbours = [{"prompt": OTHER_PROMPTS[i % 4], "max_tokens": 4 + i, "temperature": 1.0, "seed": 50 + i}
                  for i in range(6)]
    for _ in range(2):  # other neighbours, other order
        batch = concurrently(client, [seeded, *neighbours, greedy])
        assert [batch[0]["choices"][0]["text"], batch[-1]["choices"][0]["text"]] == alone
        neighbours = [{**b, "seed": b["seed"] + 100} for b in reversed(neighbours)]


@pytest.mark.slow
def test_stops_and_max_tokens_per_request_in_a_mixed_batch(client: httpx.Client) -> None:
    full = complete(client, prompt=USER_HEADER_PROMPT, max_tokens=16, temperature=0)["choices"][0]["text"]
    stop = next(full[i:i + 2] for i in range(4, len(full) - 1) if "\ufffd" not in full[i:i + 2])
    bodies = [{"prompt": USER_HEADER_PROMPT, "max_tokens": 16, "temperature": 0, "stop": [stop]},
              {"prompt": USER_HEADER_PROMPT, "max_tokens": 3, "temperature": 0},
              {"prompt": USER_HEADER_PROMPT, "max_tokens": 16, "temperature": 0},
              {"prompt": OTHER_PROMPTS[1], "max_tokens": 5, "temperature": 1.0, "seed": 1, "n": 2}]
    cut, short, whole, other = concurrently(client, bodies)
    assert (cut["choices"][0]["text"], cut["choices"][0]["matched_stop"]) == (full[:full.index(stop)], stop)
    assert short["choices"][0]["finish_reason"] == "length" and short["usage"]["completion_tokens"] == 3
    assert full.startswith(short["choices"][0]["text"])
    assert whole["choices"][0]["text"] == full and whole["usage"]["completion_tokens"] == 16
    assert other["usage"]["completion_tokens"] == 10 and len(other["choices"]) == 2


@pytest.mark.slow
def test_a_list_of_prompts_is_one_batch_with_indexed_choices(client: httpx.Client) -> None:
    data = complete(client, prompt=[USER_HEADER_PROMPT, "hello"], max_tokens=4, temperature=1.0, seed=3, n=2)
    assert [c["index"] for c in data["choices"]] == [0, 1, 2, 3]
    alone = complete(client, prompt="hello", max_tokens=4, temperature=1.0, seed=3, n=2)
    assert [c["text"] for c in data["choices"][2:]] == [c["text"] for c in alone["choices"]]
    assert data["usage"]["completion_tokens"] == 16
