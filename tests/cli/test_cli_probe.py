"""`userturn probe` end to end as a real process against a real loopback server on 127.0.0.1."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from cli_process import QWEN_DIR, USERTURN, assert_one_line_error, probe, write_dataset
from loopback_server import LoopbackServer
from ports import free_port
from results_lines import record_lines

from userturn.core.jsonl import read_records

pytestmark = pytest.mark.slow









@pytest.fixture(scope="module")
def server():
    with LoopbackServer() as srv:
        yield srv


def test_probe_writes_records_and_resumes_without_requests(server, tmp_path):
    data = write_dataset(tmp_path / "data.jsonl", 3)
    out = tmp_path / "out.jsonl"
    common = ["--base-url", server.base_url, "--model", "loopback", "--dataset", str(data), "--out", str(out),
              "--tokenizer", QWEN_DIR, "--temperature", "0", "--temperature", "1.0", "--samples", "2",
              "--no-progress"]
    before = server.stats().get("completions", 0)
    first = probe(*common)
    assert first.returncode == 0, first.stderr
    assert "wrote 12 records" in first.stderr
    records, report = read_records(out)
    assert len(records) == 12 and report.lines == 12
    rec = records["loopback|data|q1|raw|none|t=1.0|s=1"]
    assert rec.status == "ok" and rec.user_turn and rec.finish_reason == "stop"
    assert len(rec.template_sha256) == 64 and len(rec.prompt_sha256) == 64
    assert len({r.seed for r in records.values()}) == 12
    after_first = server.stats().get("completions", 0)
    assert after_first - before == 12

    second = probe(*common)
    assert second.returncode == 0 and "already done 12" in second.stderr
    assert server.stats().get("completions", 0) == after_first  # no request sent on resume


def test_sigkill_mid_run_then_resume_loses_nothing(tmp_path):
    data = write_dataset(tmp_path / "data.jsonl", 150)
    out = tmp_path / "out.jsonl"
    with LoopbackServer("--latency-ms", "40") as srv:
        args = [*USERTURN, "probe", "--base-url", srv.base_url, "--model", "loopback", "--dataset", str(data),
                "--out", str(out), "--tokenizer", QWEN_DIR, "--temperature", "0.7", "--samples", "2",
                "--concurrency", "8", "--no-progress"]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists() or out.stat().st_size < 20_000):
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        partial, _ = read_records(out)
        assert 0 < len(partial) < 300
        resumed = subprocess.run(args, capture_output=True, text=True, timeout=180)
        assert resumed.returncode == 0, resumed.stderr
    records, _report = read_records(out)
    assert len(records) == 300 and all(r.status == "ok" for r in records.values())
    lines = record_lines(out)  # every line parses
    ok_keys = [x["key"] for x in lines if x["status"] == "ok"]
    assert len(ok_keys) == len(set(ok_keys)) == 300


def test_malformed_dataset_line_names_file_and_line(tmp_path):
    data = write_dataset(tmp_path / "data.jsonl", 2)
    with data.open("a") as fh:
        fh.write('{"id": "bad", "messages": [\n')
    proc = probe("--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--dataset", str(data),
                 "--out", str(tmp_path / "o.jsonl"), "--tokenizer", QWEN_DIR)
    assert_one_line_error(proc, 2, f"{data}:3", "invalid JSON")


def test_missing_field_names_file_line_and_field(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text('{"id": "a"}\n')
    proc = probe("--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--dataset", str(data),
                 "--out", str(tmp_path / "o.jsonl"), "--tokenizer", QWEN_DIR)
    assert_one_line_error(proc, 2, f"{data}:1", "messages")


def test_unknown_tokenizer_is_one_line(server, tmp_path):
    data = write_dataset(tmp_path / "data.jsonl", 1)
    proc = probe("--base-url", server.base_url, "--model", "m", "--dataset", str(data),
                 "--out", str(tmp_path / "o.jsonl"), "--tokenizer", str(tmp_path / "no-such-tokenizer"),
                 env={"HF_HUB_OFFLINE": "1"})
    assert_one_line_error(proc, 2, "no-such-tokenizer")




def test_unreachable_base_url_is_one_line(tmp_path):
    data = write_dataset(tmp_path / "data.jsonl", 1)
    url = f"http://127.0.0.1:{free_port()}/v1"
    proc = probe("--base-url", url, "--model", "m", "--dataset", str(data), "--out", str(tmp_path / "o.jsonl"),
                 "--tokenizer", QWEN_DIR)
    assert_one_line_error(proc, 3, "cannot reach", url)


def test_401_is_one_line_and_keeps_results(tmp_path):
    data = write_dataset(tmp_path / "data.jsonl", 1)
    out = tmp_path / "o.jsonl"
    out.write_text('{"key": "k"')  # a torn line left by an earlier crash must not break the run
    with LoopbackServer("--api-key", "sekret", "--model", "m") as srv:
        proc = probe("--base-url", srv.base_url, "--model", "m", "--dataset", str(data), "--out", str(out),
                     "--tokenizer", QWEN_DIR, env={"MY_KEY": "wrong"}, timeout=60)
        assert_one_line_error(proc, 3, "401")
        good = probe("--base-url", srv.base_url, "--model", "m", "--dataset", str(data), "--out", str(out),
                     "--tokenizer", QWEN_DIR, "--api-key-env", "MY_KEY", "--no-progress",
                     env={"MY_KEY": "sekret"}, timeout=60)
    assert good.returncode == 0, good.stderr
    records, report = read_records(out)
    assert len(records) == 1 and not report.torn_tail
    assert "sekret" not in out.read_text()


def test_probe_with_an_external_manifest_needs_no_server_flags(server, tmp_path):
    data = write_dataset(tmp_path / "data.jsonl", 2)
    manifest = tmp_path / "loop.yaml"
    manifest.write_text(
        f"name: loop\nengine: external\nbase_url: {server.base_url}\nserved_model_name: loopback\n"
        f"probe:\n  tokenizer: {QWEN_DIR}\n  stop: ['###']\n  send_stop_token_ids: true\n  max_tokens: 7\n")
    out = tmp_path / "out.jsonl"
    proc = probe("--manifest", str(manifest), "--dataset", str(data), "--out", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    records, _ = read_records(out)
    assert len(records) == 2 and {r.model for r in records.values()} == {"loopback"}


def test_bad_manifest_is_one_line(tmp_path):
    data = write_dataset(tmp_path / "data.jsonl", 1)
    manifest = tmp_path / "bad.yaml"
    manifest.write_text("name: bad\nengine: external\nbase_url: http://127.0.0.1:9/v1\nbogus_key: 1\n")
    proc = probe("--manifest", str(manifest), "--dataset", str(data), "--out", str(tmp_path / "o.jsonl"))
    assert_one_line_error(proc, 2, "bad.yaml", "bogus_key")


def test_template_kwargs_parse():
    from userturn.cli.probe import parse_template_kwargs
    from userturn.core.errors import UserError

    assert parse_template_kwargs(["reasoning_effort=high", "n=3", "flag=true"]) == {
        "reasoning_effort": "high", "n": 3, "flag": True}
    with pytest.raises(UserError, match="KEY=VALUE"):
        parse_template_kwargs(["novalue"])


@pytest.mark.parametrize("flags, needle", [
    (["--samples", "0"], "--samples: must be at least 1"),
    (["--concurrency", "-3"], "--concurrency: must be at least 1"),
    (["--temperature", "-1"], "--temperature: must be 0 or more"),
    (["--request-timeout", "0"], "--request-timeout: must be positive"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_flags_are_one_line(tmp_path, flags, needle):
    proc = probe("--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--dataset", "x.jsonl",
                 "--out", str(tmp_path / "o.jsonl"), *flags, timeout=30)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("userturn") and " error: " in lines[0], proc.stderr
    assert needle in lines[0], proc.stderr


def test_repeated_temperature_is_one_line(server, tmp_path):
    data = write_dataset(tmp_path / "data.jsonl", 1)
    proc = probe("--base-url", server.base_url, "--model", "loopback", "--dataset", str(data), "--out",
                 str(tmp_path / "o.jsonl"), "--tokenizer", QWEN_DIR, "--temperature", "1", "--temperature", "1.0")
    assert_one_line_error(proc, 2, "planned twice")


def test_resume_with_another_setting_exits_2_and_leaves_the_file_untouched(server, tmp_path):
    data = write_dataset(tmp_path / "data.jsonl", 2)
    out = tmp_path / "out.jsonl"
    common = ["--base-url", server.base_url, "--model", "loopback", "--dataset", str(data), "--out", str(out),
              "--tokenizer", QWEN_DIR, "--no-progress"]
    assert probe(*common, "--max-tokens", "16").returncode == 0
    before = out.read_bytes()
    sent = server.stats().get("completions", 0)
    refused = probe(*common, "--max-tokens", "8")
    assert_one_line_error(refused, 2, f"{out} holds records made with max_tokens=16, this run has max_tokens=8; "
                                      "use another --out")
    refused = probe(*common, "--max-tokens", "16", "--template-kwarg", "enable_thinking=false")
    assert_one_line_error(refused, 2, "template_kwargs={}, this run has template_kwargs={\"enable_thinking\":false}")
    assert out.read_bytes() == before and server.stats().get("completions", 0) == sent
    # the same configuration resumes; a new temperature is a new row of the same configuration
    again = probe(*common, "--max-tokens", "16", "--temperature", "1", "--concurrency", "3")
    assert again.returncode == 0, again.stderr
    assert len({r.config_fingerprint for r in read_records(out)[0].values()}) == 1


def test_resume_through_a_manifest_with_other_probe_defaults_is_refused(server, tmp_path):
    data = write_dataset(tmp_path / "data.jsonl", 1)
    manifest = tmp_path / "loop.yaml"
    out = tmp_path / "out.jsonl"
    for stop, code in (("###", 0), ("@@@", 2)):
        manifest.write_text(f"name: loop\nengine: external\nbase_url: {server.base_url}\nserved_model_name: loopback\n"
                            f"probe:\n  tokenizer: {QWEN_DIR}\n  stop: ['{stop}']\n")
        proc = probe("--manifest", str(manifest), "--dataset", str(data), "--out", str(out), "--no-progress")
        assert proc.returncode == code, proc.stderr
    assert_one_line_error(proc, 2, "holds records made with stop=", '"###"]', '"@@@"]')


def test_limit_and_shuffle_never_change_a_perturbed_conversation(server, tmp_path):
    data = write_dataset(tmp_path / "data.jsonl", 8)
    perturb = ["--perturb", "none", "--perturb", "wrong_answer", "--perturb", "truncate", "--perturb", "swap",
               "--perturb", "remove", "--perturb", "generic"]
    runs = {"all": [], "some": ["--limit", "3", "--shuffle-seed", "5"]}
    for name, flags in runs.items():
        proc = probe("--base-url", server.base_url, "--model", "loopback", "--dataset", str(data), "--out",
                     str(tmp_path / f"{name}.jsonl"), "--tokenizer", QWEN_DIR, "--seed", "4", "--no-progress",
                     *perturb, *flags)
        assert proc.returncode == 0, proc.stderr

    def messages(name):
        return {row["key"]: json.dumps(row["messages"]) for row in record_lines(tmp_path / f"{name}.jsonl")}

    every, some = messages("all"), messages("some")
    assert len(some) == 18 and {key.split("|")[2] for key in some} != {"q0", "q1", "q2"}  # shuffled selection
    for key, conversation in some.items():
        assert every[key] == conversation, key


def test_manifest_sampling_defaults_are_used_and_recorded(server, tmp_path):
    data = write_dataset(tmp_path / "data.jsonl", 1)
    manifest = tmp_path / "loop.yaml"
    manifest.write_text(f"name: loop\nengine: external\nbase_url: {server.base_url}\nserved_model_name: loopback\n"
                        f"probe:\n  tokenizer: {QWEN_DIR}\n  temperatures: [0.7]\n  top_p: 0.5\n")
    out = tmp_path / "out.jsonl"
    proc = probe("--manifest", str(manifest), "--dataset", str(data), "--out", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    found, report = read_records(out)
    (record,) = found.values()
    assert record.temperature == 0.7 and report.configs[record.config_fingerprint].config["top_p"] == 0.5
    flagged = probe("--manifest", str(manifest), "--dataset", str(data), "--out", str(tmp_path / "flags.jsonl"),
                    "--temperature", "0", "--top-p", "0.9", "--no-progress")
    assert flagged.returncode == 0, flagged.stderr
    found, report = read_records(tmp_path / "flags.jsonl")
    (record,) = found.values()
    assert record.temperature == 0.0 and report.configs[record.config_fingerprint].config["top_p"] == 0.9
