"""The assistant turn each item is probed with: the dataset's own, or the model's (generated once, reused from
earlier runs of the same settings)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from userturn.client.data.dataset import DatasetItem
from userturn.client.http.endpoint import Endpoint, EndpointError, RequestFailed
from userturn.client.http.replies import reasoning_text
from userturn.client.probe.perturbations import needs_partner
from userturn.client.probe.perturbations.base import PARTNER_META
from userturn.client.probe.seeds import sample_seed
from userturn.client.probe.settings import AssistantTurn, ProbeSettings
from userturn.core.fingerprint import ASSISTANT_SETTINGS
from userturn.core.records import ConfigLine, Message, ProbeRecord
from userturn.core.results_reader import decode, legacy_config, read_lines
from userturn.core.text import content_text, reasoning_of, strip_reasoning
from userturn.core.workers import run_all


class AssistantTurns:
    """Assistant turns: taken from the dataset, generated on the next of `endpoints` (a cycle the run shares with its
    requests), or reused from the results file `out_path` where `config` (the run's first configuration) agrees on
    the assistant settings."""

    def __init__(self, settings: ProbeSettings, *, endpoints: Iterator[Endpoint], out_path: str,
                 config: Mapping[str, Any]) -> None:
        self.settings = settings
        self._next_endpoint = endpoints
        self.out_path = out_path
        self._config = config

    async def collect(self, items: Sequence[DatasetItem], partners: Mapping[str, str],
                      pool_item: Callable[[str], DatasetItem]) -> dict[str, AssistantTurn]:
        """The model's assistant turn of every one of `items`, and the turn of every partner (which may lie outside
        them: `pool_item` finds it). Dataset turns of the run's own items are taken when the item is probed
        (`turn`), so a run over a dataset kept on disk holds no per-item state."""
        s = self.settings
        turns: dict[str, AssistantTurn] = {}
        needed: list[DatasetItem] = []
        wanted = {item.id: item for item in items} if s.assistant_from == "model" else {}
        for partner in partners.values():
            wanted.setdefault(partner, pool_item(partner))
        reuse = self.reusable_answers() if s.assistant_from == "model" else {}
        for item in wanted.values():
            if s.assistant_from == "dataset":
                turns[item.id] = self._dataset_turn(item)
            elif item.id in reuse:
                text, finish = reuse[item.id]
                turns[item.id] = self._with_answer(item, text, finish_reason=finish)
            else:
                needed.append(item)
        if needed:
            results = await self._fan_out(needed, self._answer)
            for item, turn in zip(needed, results, strict=True):
                turns[item.id] = turn
        return turns

    def turn(self, item: DatasetItem, turns: Mapping[str, AssistantTurn]) -> AssistantTurn:
        """The assistant turn `item` is probed with: generated (or looked up) earlier, or its dataset's own."""
        return turns.get(item.id) or self._dataset_turn(item)

    @staticmethod
    def _dataset_turn(item: DatasetItem) -> AssistantTurn:
        if item.ends_with_assistant:
            return AssistantTurn(list(item.messages), "dataset", text=item.messages[-1].content)
        return AssistantTurn(None, "dataset", error="conversation does not end with an assistant turn (use "
                                                    "--assistant-from model)")

    def _existing_records(self, configs: dict[str, dict[str, Any]]) -> Iterator[ProbeRecord]:
        """The records already in the results file, one at a time, read by the one results reader; `configs`
        collects the file's configurations as they pass (a file the resume scan refused never gets here)."""
        path = Path(self.out_path)
        if not path.exists():
            return
        for line in read_lines(path):
            decoded = decode(path, line, lambda obj: (legacy_config(obj), ProbeRecord.model_validate(obj)))
            if isinstance(decoded, ConfigLine):
                configs.setdefault(decoded.fingerprint, decoded.config)
            elif decoded is not None:
                legacy, record = decoded
                if legacy is not None:
                    configs.setdefault(legacy.fingerprint, legacy.config)
                yield record

    def reusable_answers(self) -> dict[str, tuple[str, str | None]]:
        """{item id: (assistant turn, its finish reason)} written by this model with these assistant settings in
        earlier runs (records' `meta.assistant_turn`, partner-needing records' partner turns), so a resumed run
        probes the same turns. An item's own record wins over a partner's (it alone has the finish reason) in any
        file order."""
        s = self.settings
        mine = self._config
        reuse: dict[str, tuple[str, str | None]] = {}
        partners: dict[str, tuple[str, str | None]] = {}
        configs: dict[str, dict[str, Any]] = {}
        for record in self._existing_records(configs):
            if record.assistant_source != "model":
                continue
            config = configs.get(record.config_fingerprint or "")
            if config is not None:
                if any(config.get(k) != mine.get(k) for k in ASSISTANT_SETTINGS):
                    continue  # another model, dataset, seed or assistant setting wrote this turn
            elif record.model != s.model or record.dataset != s.dataset:
                continue
            meta = record.meta or {}
            text = meta.get("assistant_turn")
            if isinstance(text, str):
                finish = meta.get("assistant_finish_reason")
                reuse.setdefault(record.item_id, (text, finish if isinstance(finish, str) else None))
            partner = meta.get(PARTNER_META)
            if (needs_partner([record.perturbation]) and isinstance(partner, str) and record.messages
                    and record.messages[-1].role == "assistant"):
                partners.setdefault(partner, (record.messages[-1].content, None))
        return {**partners, **reuse}

    def _history(self, item: DatasetItem) -> list[Message]:
        """The conversation the model answers: everything up to (not including) a final assistant turn."""
        return list(item.messages[:-1]) if item.ends_with_assistant else list(item.messages)

    def _with_answer(self, item: DatasetItem, text: str, reasoning: str | None = None,
                     finish_reason: str | None = None) -> AssistantTurn:
        extra = {"reasoning_content": reasoning} if reasoning else {}
        messages = [*self._history(item), Message(role="assistant", content=text, **extra)]
        return AssistantTurn(messages, "model", text=text, finish_reason=finish_reason)

    async def _answer(self, item: DatasetItem) -> AssistantTurn:
        s = self.settings
        history = self._history(item)
        payload = {
            "model": s.model,
            "messages": [m.model_dump(exclude_none=True) for m in history],
            "temperature": s.assistant_temperature,
            "max_tokens": s.assistant_max_tokens,
            "seed": sample_seed(s.seed, item.id, s.assistant_temperature, 0, "assistant"),
            **s.engine_traits.neutral_sampler,
            **s.extra_body,
        }
        try:
            result = await next(self._next_endpoint).post_json("chat/completions", payload)
            choice = result.data["choices"][0]
            message = choice["message"]
            content = content_text(message.get("content"))  # a list of parts joined; TypeError for others
        except RequestFailed as exc:
            if exc.endpoint_down:
                raise EndpointError(exc.endpoint_down) from None
            return AssistantTurn(None, "model", error=f"assistant turn failed: {exc.reason}")
        except (KeyError, IndexError, TypeError):
            return AssistantTurn(None, "model", error="assistant turn failed: malformed chat completion")
        reasoning = reasoning_text(message, s.engine_traits)
        if "<think>" in content or "</think>" in content:
            reasoning = reasoning or reasoning_of(content)
            content = strip_reasoning(content)
        finish = choice.get("finish_reason")
        finish = finish if isinstance(finish, str) else None
        if not content.strip():
            # Nothing to probe or score (e.g. reasoning used up --assistant-max-tokens): an error, not a wrong answer.
            return AssistantTurn(None, "model", error=f"assistant turn failed: empty answer (finish_reason {finish}"
                                 f"{'; raise --assistant-max-tokens' if finish == 'length' else ''})")
        return self._with_answer(item, content, reasoning, finish)

    async def _fan_out(self, inputs: Sequence[Any], work: Callable[[Any], Any]) -> list[Any]:
        """Run `work` over inputs with the concurrency limit, preserving order."""
        results: list[Any] = [None] * len(inputs)
        feed = iter(enumerate(inputs))

        async def worker() -> None:
            for index, value in feed:
                results[index] = await work(value)

        await run_all(worker() for _ in range(min(self.settings.concurrency, len(inputs))))
        return results
