"""core.fingerprint: canonical fingerprints, the first differing setting, the resume check's scope."""

from __future__ import annotations

import hashlib

import pytest

from userturn.core.fingerprint import (
    ConfigMismatch,
    GenerationContext,
    check_resume,
    check_unfingerprinted,
    fingerprint,
    first_difference,
    generation_config,
)
from userturn.core.options import ProbeOptions

BASE = generation_config(GenerationContext(model="m", dataset="d", mode="raw", perturbation="none",
                                           assistant_source="dataset", template_engine="jinja",
                                           template_sha256="a" * 64, template_kwargs={}, stop=["<|im_end|>"]),
                         ProbeOptions())


def test_fingerprint_is_sha256_of_canonical_json_and_ignores_key_order():
    config = {"b": 1, "a": [1, "x"], "c": {"z": None, "y": 0.5}}
    canonical = b'{"a":[1,"x"],"b":1,"c":{"y":0.5,"z":null}}'
    assert fingerprint(config) == hashlib.sha256(canonical).hexdigest()[:16]
    assert fingerprint(dict(reversed(config.items()))) == fingerprint(config)
    assert fingerprint({**config, "b": 2}) != fingerprint(config)


def test_first_difference_follows_the_current_order():
    assert first_difference(BASE, dict(BASE)) is None
    changed = {**BASE, "seed": 3, "max_tokens": 64}
    assert first_difference(BASE, changed) == ("max_tokens", 256, 64)  # max_tokens comes before seed
    assert first_difference({**BASE, "old_only": 1}, BASE) == ("old_only", 1, None)


def test_check_resume_compares_only_the_same_model_dataset_mode_and_perturbation():
    existing = {fingerprint(c): c for c in (
        {**BASE, "model": "other", "max_tokens": 8},  # another model: another row, not a conflict
        {**BASE, "perturbation": "swap", "max_tokens": 8},  # another perturbation
        {**BASE, "mode": "chat", "template_sha256": None},
    )}
    check_resume(existing, BASE, path="r.jsonl")
    existing[fingerprint(BASE)] = BASE
    check_resume(existing, BASE, path="r.jsonl")  # the same configuration resumes
    with pytest.raises(ConfigMismatch) as caught:
        check_resume(existing, {**BASE, "template_sha256": "b" * 64}, path="r.jsonl", hint="use another --out-dir")
    assert str(caught.value) == ("r.jsonl holds records made with template_sha256=aaaaaaaaaaaa, this run has "
                                 "template_sha256=bbbbbbbbbbbb; use another --out-dir")


def test_records_without_a_fingerprint_are_refused_only_where_this_run_plans_their_keys():
    check_unfingerprinted(["m|d|q1|raw|none|t=0|s=0"], {"m|d|q0|raw|none|t=1|s=0"}, path="r.jsonl")
    with pytest.raises(ConfigMismatch, match=r"r\.jsonl holds records without a configuration fingerprint"):
        check_unfingerprinted(["m|d|q1|raw|none|t=0|s=0"], {"m|d|q1|raw|none|t=0|s=0"}, path="r.jsonl")
    check_unfingerprinted([], {"k"}, path="r.jsonl")
    with pytest.raises(ConfigMismatch, match="max_tokens=256, this run has max_tokens=1"):
        check_resume({fingerprint(BASE): BASE}, {**BASE, "max_tokens": 1}, path="r.jsonl")


def test_the_run_line_redacts_keys_and_url_credentials():
    from userturn.core.fingerprint import redacted_command, run_info

    argv = ["userturn", "probe", "--base-url", "https://alice:s3cret@api.example.com/v1?api-version=2", "--api-key",
            "sk-abcdef123456", "--judge-api-key=sk-zzz", "--api-key-env", "MY_KEY", "--tokenizer", "Qwen/Qwen3-8B",
            "--hf-token", "hf_x", "--model", "m", "tok-SECRET-1234"]
    assert redacted_command(argv, scrub=lambda text: text.replace("tok-SECRET-1234", "[redacted $KEY]")) == [
        "userturn", "probe", "--base-url", "https://[redacted]@api.example.com/v1?api-version=2", "--api-key",
        "[redacted]", "--judge-api-key=[redacted]", "--api-key-env", "MY_KEY", "--tokenizer", "Qwen/Qwen3-8B",
        "--hf-token", "[redacted]", "--model", "m", "[redacted $KEY]"]
    info = run_info(["userturn", "probe"])
    assert info.command == ["userturn", "probe"] and info.host and info.userturn_version
