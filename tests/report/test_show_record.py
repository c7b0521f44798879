"""`userturn show RESULTS.jsonl KEY`: the prompt it prints is, byte for byte, the one a real server received."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_process import QWEN_DIR
from mock_http import MockServer, completion_handler

from userturn.cli import main
from userturn.client.render.prompt_replay import find_record
from userturn.core.jsonl import JsonlWriter, read_configs, read_records
from userturn.core.records import JudgeVerdict

# What a template must carry through untouched: a system prompt, leading/trailing blanks, CRLF, tabs, non-ASCII.
CONVERSATIONS = [
    [{"role": "system", "content": "You are terse.\t Answer in French  "},
     {"role": "user", "content": "  Combien font 2 + 2 ?\r\nRéponds vite 🙂"},
     {"role": "assistant", "content": "4. #### 4"}],
    [{"role": "user", "content": "How many clips did Natalia sell? She sold 48 in April."},
     {"role": "assistant", "content": "She sold 72 clips.\n\n#### 72"}],
]


def write_dataset(path: Path) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i}", "answer": messages[-1]["content"].split()[-1],
                                        "messages": messages, "meta": {"second_turn": f"And then {i}?"}}) + "\n"
                            for i, messages in enumerate(CONVERSATIONS)))
    return path


def probe(server: MockServer, data: Path, out: Path, *extra: str) -> None:
    assert main(["probe", "--base-url", server.base_url, "--model", "mock", "--dataset", str(data), "--out", str(out),
                 "--temperature", "0", "--temperature", "0.7", "--perturb", "none", "--perturb", "wrong_answer",
                 "--no-progress", *extra]) == 0


@pytest.fixture
def raw_run(tmp_path: Path) -> tuple[Path, list[dict]]:
    out = tmp_path / "out.jsonl"
    with MockServer(completion_handler(lambda body: f"Why {body['seed'] % 97}?")) as server:
        probe(server, write_dataset(tmp_path / "d.jsonl"), out, "--tokenizer", QWEN_DIR,
              "--enable-thinking", "false")
        bodies = server.bodies("/completions")
    return out, bodies


@pytest.mark.parametrize("flags", [[], ["--tokenizer", QWEN_DIR]])
def test_prompt_only_equals_every_prompt_the_server_received(raw_run, capsys, flags):
    """With no flags, from the results file alone (its configuration line holds the template text); with the
    tokenizer given, from its files."""
    out, bodies = raw_run
    records, _ = read_records(out)
    assert len(records) == len(bodies) == 8
    sent = {body["seed"]: body["prompt"] for body in bodies}
    for record in records.values():
        assert main(["show", str(out), record.key, "--prompt-only", *flags]) == 0
        printed = capsys.readouterr().out
        assert printed.encode() == sent[record.seed].encode()
    assert "\r\n" in sent[records["mock|d|q0|raw|none|t=0.0|s=0"].seed]  # the CRLF went through unchanged


def test_full_view_holds_the_exact_prompt_turn_human_turn_and_verdicts(raw_run, capsys):
    out, bodies = raw_run
    records, _ = read_records(out)
    record = records["mock|d|q0|raw|wrong_answer|t=0.7|s=0"]
    record.label, record.label_source, record.judge_status = "genuine_followup", "majority", "ok"
    record.judges = [JudgeVerdict(judge="judge-a", status="ok", label="genuine_followup", rationale="asks why 4",
                                  prompt_sha256="ab" * 32),
                     JudgeVerdict(judge="judge-b", status="error", error="no verdict", raw="{oops")]
    with JsonlWriter(out) as writer:  # a later line with the same key wins, as judging appends
        writer.write(record)
    assert main(["show", str(out), record.key, "--tokenizer", QWEN_DIR]) == 0
    view = capsys.readouterr().out
    prompt = next(b["prompt"] for b in bodies if b["seed"] == record.seed)
    _, rest = view.split(" chars; sha256 ", 1)
    body = rest.split("\n", 1)[1]
    assert body.startswith(prompt + "\n── end of prompt")  # verbatim between the two rules
    assert "= the record's prompt_sha256" in rest.split("\n", 1)[0]
    assert record.user_turn in view and "And then 0?" in view
    assert "run          userturn " in view  # who wrote the configuration line: version, host, time, command
    assert "judge-a [judge]: genuine_followup" in view and "asks why 4" in view and "judge prompt sha256 abab" in view
    assert "judge-b: ERROR no verdict" in view and "raw: {oops" in view
    assert "verdicts: genuine_followup (majority)" in view


def test_wrong_template_is_refused_and_missing_tokenizer_is_explained(raw_run, tmp_path, capsys):
    out, _ = raw_run
    key = "mock|d|q1|raw|none|t=0.0|s=0"
    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    assert main(["show", str(out), key, "--tokenizer", QWEN_DIR, "--chat-template", str(template),
                 "--prompt-only"]) == 2
    assert "is not the one the record was rendered with" in capsys.readouterr().err
    assert main(["show", str(out), key]) == 0  # no flags: rendered from the file's configuration line, checked
    assert "= the record's prompt_sha256" in capsys.readouterr().out
    old = tmp_path / "old.jsonl"  # a file from before configuration lines: the record without its prompt, and why
    old.write_text("".join(line + "\n" for line in out.read_text().splitlines() if '"type":"config"' not in line))
    assert main(["show", str(old), key]) == 0
    view = capsys.readouterr().out
    assert "(not shown:" in view and "--tokenizer" in view and "Why" in view


def test_template_kwargs_come_from_the_record(raw_run, capsys):
    """The probe ran with --enable-thinking false; show is not told, the configuration line's template_kwargs
    says."""
    out, bodies = raw_run
    record = find_record(out, "mock|d|q1|raw|none|t=0.0|s=0")
    assert read_configs(out)[record.config_fingerprint].config["template_kwargs"] == {"enable_thinking": False}
    assert main(["show", str(out), record.key, "--tokenizer", QWEN_DIR, "--prompt-only"]) == 0
    assert capsys.readouterr().out == next(b["prompt"] for b in bodies if b["seed"] == record.seed)


def test_chat_mode_messages_equal_what_the_server_received(tmp_path, capsys):
    out = tmp_path / "chat.jsonl"
    with MockServer(completion_handler()) as server:
        probe(server, write_dataset(tmp_path / "d.jsonl"), out, "--mode", "chat")
        bodies = server.bodies("/chat/completions")
    records, _ = read_records(out)
    sent = {body["seed"]: body["messages"] for body in bodies}
    for record in records.values():
        assert main(["show", str(out), record.key, "--prompt-only"]) == 0
        assert json.loads(capsys.readouterr().out) == sent[record.seed]


def test_unknown_key_is_one_line_with_close_matches_exit_2(raw_run):
    out, _ = raw_run
    proc = subprocess.run([sys.executable, "-m", "userturn", "show", str(out), "mock|d|q1|raw|none|t=0|s=0"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no record with key 'mock|d|q1|raw|none|t=0|s=0'" in lines[0]
    assert "closest: " in lines[0] and "mock|d|q1|raw|none|t=0.0|s=0" in lines[0].split("closest: ")[1]


def test_prompt_only_bytes_on_a_real_stdout(raw_run):
    """Through a process's stdout (no capture layer): the bytes equal the request's prompt encoded as UTF-8."""
    out, bodies = raw_run
    record = find_record(out, "mock|d|q0|raw|none|t=0.0|s=0")
    proc = subprocess.run([sys.executable, "-m", "userturn", "show", str(out), record.key, "--tokenizer", QWEN_DIR,
                           "--prompt-only"], capture_output=True, timeout=60,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONIOENCODING": "utf-8"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == next(b["prompt"] for b in bodies if b["seed"] == record.seed).encode()


def test_manifest_gives_the_tokenizer_and_a_bad_tokenizer_is_an_error(raw_run, tmp_path, capsys):
    out, bodies = raw_run
    manifest = tmp_path / "loop.yaml"
    manifest.write_text(f"name: loop\nengine: external\nbase_url: http://127.0.0.1:9/v1\nserved_model_name: mock\n"
                        f"probe:\n  tokenizer: {QWEN_DIR}\n")
    record = find_record(out, "mock|d|q1|raw|wrong_answer|t=0.7|s=0")
    assert main(["show", str(out), record.key, "--manifest", str(manifest), "--prompt-only"]) == 0
    assert capsys.readouterr().out == next(b["prompt"] for b in bodies if b["seed"] == record.seed)
    assert main(["show", str(out), record.key, "--tokenizer", str(tmp_path / "missing")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "missing" in captured.err


def test_record_flags_need_a_key_and_limit_needs_the_table(raw_run, capsys):
    out, _ = raw_run
    assert main(["show", str(out), "--prompt-only"]) == 2
    assert "--prompt-only needs a KEY" in capsys.readouterr().err
    assert main(["show", str(out), "mock|d|q1|raw|none|t=0.0|s=0", "--limit", "2"]) == 2
    assert "--limit applies to the table" in capsys.readouterr().err


def test_a_template_that_prints_the_date_needs_the_probe_day_and_a_wrong_one_is_a_mismatch(tmp_path, capsys):
    import datetime as dt

    template = tmp_path / "dated.jinja"
    template.write_text("Today is {{ strftime_now('%Y-%m-%d') }}.\n{% for m in messages %}<|{{ m.role }}|>"
                        "{{ m.content }}<|end|>\n{% endfor %}")
    out = tmp_path / "out.jsonl"
    with MockServer(completion_handler()) as server:
        probe(server, write_dataset(tmp_path / "d.jsonl"), out, "--tokenizer", QWEN_DIR, "--chat-template",
              str(template))
        sent = {b["seed"]: b["prompt"] for b in server.bodies("/completions")}
    record = find_record(out, "mock|d|q0|raw|none|t=0.0|s=0")
    today = sent[record.seed][len("Today is "):].split(".", 1)[0]  # the probe's day (read back: no midnight race)
    assert dt.date.fromisoformat(today)
    common = ["show", str(out), record.key, "--tokenizer", QWEN_DIR, "--chat-template", str(template)]
    assert main([*common, "--date", today, "--prompt-only"]) == 0
    assert capsys.readouterr().out == sent[record.seed]
    assert main([*common, "--date", "2020-01-02"]) == 1  # another day: shown, marked, exit 1
    view = capsys.readouterr().out
    assert "MISMATCH" in view and "this is not the prompt that was sent" in view and "Today is 2020-01-02" in view
    assert main([*common, "--date", "2020-01-02", "--prompt-only"]) == 1
    assert "is not the record's prompt_sha256" in capsys.readouterr().err
