"""A stand-in for an Ollama server, answering as Ollama's own source does (server/routes.go, openai/openai.go,
api/types.go), for `MockServer` (tests/support/mock_http.py) on 127.0.0.1:

* `GET /api/version` -> `{"version": V}`; `POST /api/show {"model": M}` -> the model's `template`, `parameters`
  (one `name value` line per Modelfile PARAMETER, Go's %#v), `details`, `model_info`; 404 for another model.
* `POST /v1/completions`: openai.FromCompleteRequest keeps only stop, max_tokens (num_predict), temperature (1.0
  when absent), seed, the presence/frequency penalties and top_p (1.0 when 0 or absent); every other field (top_k,
  min_p, repeat_penalty, ...) is dropped, so those samplers are the model's PARAMETERs over api.DefaultOptions.
  GenerateHandler never sets `raw` here: the prompt becomes a user message rendered with the model's TEMPLATE. The
  "model" then continues the rendered text: at an open assistant header it answers as the assistant, at an open
  user header it writes a user turn. Replies carry `system_fingerprint: "fp_ollama"`.
* `POST /v1/chat/completions`: the messages rendered with the template, answered as the assistant.
* Every other route: gin's plain-text `404 page not found`.

`StandinOllama.sampled` keeps the options each generation ran with (what the runner would sample with)."""

from __future__ import annotations

import json
from typing import Any

import httpx

CHATML = ("{{- if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
          "<|im_start|>user\n{{ .Prompt }}<|im_end|>\n<|im_start|>assistant\n")
PASS_THROUGH = "{{ .Prompt }}"
DEFAULT_OPTIONS = {"top_k": 40, "top_p": 0.9, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0,
                   "repeat_last_n": 64}  # api/types.go DefaultOptions (repeat_penalty 1.0 since 0.32.10)
ASSISTANT_REPLY = "The answer is 4."
USER_REPLY = "Why is that the answer?"


def render(template: str, messages: list[dict[str, str]]) -> str:
    """The two templates this stand-in knows, as Ollama's template package renders them for one conversation: the
    last user message is `.Prompt`, a system message `.System`."""
    prompt = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    if template == PASS_THROUGH:
        return prompt
    assert template == CHATML, f"the stand-in renders only {PASS_THROUGH!r} and ChatML"
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    head = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
    return f"{head}<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


class StandinOllama:
    """One Ollama server holding one model with `template` and Modelfile `parameters`; call it as an httpx-style
    handler."""

    def __init__(self, model: str, template: str, parameters: dict[str, Any] | None = None,
                 version: str = "0.33.0") -> None:
        self.model, self.template, self.version = model, template, version
        self.parameters = dict(parameters or {})
        self.sampled: list[dict[str, Any]] = []  # the options of every generation, as the runner got them
        self.rendered: list[str] = []  # the text every generation continued

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET" and path == "/api/version":
            return httpx.Response(200, json={"version": self.version})
        if request.method == "GET" and path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [
                {"id": self.model, "object": "model", "created": 1700000000, "owned_by": "library"}]})
        if request.method == "POST" and path == "/api/show":
            return self._show(request)
        if request.method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            return self._generate(request, chat=path.endswith("chat/completions"))
        return httpx.Response(404, text="404 page not found")

    def _show(self, request: httpx.Request) -> httpx.Response:
        if not request.content:
            return httpx.Response(400, json={"error": "missing request body"})
        if json.loads(request.content).get("model") != self.model:
            return httpx.Response(404, json={"error": f"model '{json.loads(request.content).get('model')}' not "
                                                      "found"})
        parameters = "\n".join(f"{name:<30} {value!r}" if not isinstance(value, str) else f"{name:<30} \"{value}\""
                               for name, value in self.parameters.items())
        return httpx.Response(200, json={
            "modelfile": f"FROM {self.model}\nTEMPLATE \"\"\"{self.template}\"\"\"", "parameters": parameters,
            "template": self.template, "details": {"format": "gguf", "family": "qwen3"}, "model_info": {},
            "capabilities": ["completion"]})

    def _generate(self, request: httpx.Request, *, chat: bool) -> httpx.Response:
        body = json.loads(request.content)
        if body.get("model") != self.model:
            return httpx.Response(404, json={"error": {"message": f"model '{body.get('model')}' not found",
                                                       "type": "api_error"}})
        options = {**DEFAULT_OPTIONS, **self.parameters}  # Modelfile PARAMETERs over the defaults
        options.update({"temperature": body.get("temperature", 1.0), "top_p": body.get("top_p") or 1.0,
                        "frequency_penalty": body.get("frequency_penalty", 0.0),
                        "presence_penalty": body.get("presence_penalty", 0.0)})
        if body.get("seed") is not None:
            options["seed"] = body["seed"]
        self.sampled.append(options)
        messages = body["messages"] if chat else [{"role": "user", "content": body["prompt"]}]
        text = render(self.template, messages)
        self.rendered.append(text)
        reply = ASSISTANT_REPLY if text.endswith("<|im_start|>assistant\n") or chat else USER_REPLY
        usage = {"prompt_tokens": len(text) // 4, "completion_tokens": 5, "total_tokens": len(text) // 4 + 5}
        common = {"id": f"cmpl-{len(self.sampled)}", "created": 1700000000, "model": self.model,
                  "system_fingerprint": "fp_ollama", "usage": usage}
        if chat:
            return httpx.Response(200, json={**common, "object": "chat.completion", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}]})
        return httpx.Response(200, json={**common, "object": "text_completion", "choices": [
            {"text": reply, "index": 0, "finish_reason": "stop"}]})
