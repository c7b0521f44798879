"""Records and results lines made by hand for tests."""

from __future__ import annotations

import json

from userturn.core.records import Message, ProbeRecord, record_key


def make_record(item: int | str, sample: int = 0, user_turn: str = "And what about x?", **extra: object) -> ProbeRecord:
    fields: dict[str, object] = {
        "key": record_key("m", "d", str(item), "none", 1.0, sample),
        "model": "m", "dataset": "d", "item_id": str(item), "temperature": 1.0, "sample": sample, "seed": 7,
        "messages": [Message(role="user", content="q"), Message(role="assistant", content="a")],
        "user_turn": user_turn, "status": "ok", **extra,
    }
    return ProbeRecord.model_validate(fields)


def line_of(record: ProbeRecord) -> bytes:
    return json.dumps(record.model_dump(mode="json"), ensure_ascii=False).encode() + b"\n"
