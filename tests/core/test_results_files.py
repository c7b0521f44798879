"""userturn/core/results_files.py: several results files (a sharded run's) read as one by report, show, export,
rerank, judge and compact. The records of several files count as their concatenation: the same outputs, byte for
byte, as one file holding the same lines; a sharded run's report is the unsharded one's."""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from pathlib import Path

import httpx
import orjson
import pytest
import respx

from userturn.cli import main
from userturn.client.render.chat_mode import role_flip_messages
from userturn.core.errors import UserError
from userturn.core.records import ConfigLine, Message, record_key, sha256_text
from userturn.core.results_files import read_results, results_files
from userturn.report.stats import Z95
from userturn.report.summary import summarise_file

MODELS = {"org/m-1B": "1" * 16, "org/m-8B": "8" * 16}  # model -> its configuration's fingerprint
LABELS = ["genuine_followup", "generic", "restates_query", None]


def line(obj: dict) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)


def config(model: str) -> bytes:
    return ConfigLine(fingerprint=MODELS[model], config={"model": model, "max_tokens": 64}).model_dump_json().encode() \
        + b"\n"


def grid(seed: int = 7) -> list[dict]:
    """Records of a small grid (2 models x 12 items x none/wrong_answer x T=0 (1 sample) / T=1 (2 samples)), with
    labels, judge failures, generation errors retried later, task scores, usage and the human next turn."""
    rng = random.Random(seed)
    out = []
    for model, fingerprint in MODELS.items():
        for item in (f"q{i}" for i in range(12)):
            for perturbation in ("none", "wrong_answer"):
                for temperature, samples in ((0.0, 1), (1.0, 2)):
                    for sample in range(samples):
                        label = rng.choice(LABELS)
                        mode = "chat" if model == "org/m-8B" else "raw"
                        messages = [Message(role="user", content=f"question {item}?"),
                                    Message(role="assistant", content=f"answer {sample % 2} to {item}")]
                        record = {
                            "schema_version": 3, "key": record_key(model, "gsm8k", item, perturbation, temperature,
                                                                   sample, mode), "mode": mode,
                            "prompt_sha256": chat_prompt_sha256(messages) if mode == "chat" else None,
                            "status": "ok", "judge_status": "ok" if label else rng.choice([None, "error"]),
                            "config_fingerprint": fingerprint, "model": model, "dataset": "gsm8k", "item_id": item,
                            "perturbation": perturbation, "temperature": temperature, "sample": sample, "seed": sample,
                            "messages": [m.model_dump() for m in messages],
                            "user_turn": f"{model} asks about {item} ({perturbation}, T={temperature}, s{sample})?",
                            "finish_reason": "stop", "correct": rng.random() < 0.6,
                            "usage": {"prompt_tokens": 20 + sample, "completion_tokens": rng.randint(1, 9)},
                            "meta": {"assistant_sample": sample % 2, "query_id": item,
                                     "second_turn": f"human follow-up on {item}"},
                            "label": label, "label_source": "judge" if label else None,
                            "judges": [{"judge": "j", "status": "ok", "label": label}] if label else []}
                        if rng.random() < 0.1:  # failed first, retried later in the same run (same shard)
                            out.append({**record, "status": "error", "user_turn": None, "label": None,
                                        "label_source": None, "judges": [], "judge_status": None, "error": "timeout"})
                        out.append(record)
    rng.shuffle(out)  # records land in completion order
    return out


def chat_prompt_sha256(messages: list[Message]) -> str:
    """What a chat-mode probe records as the prompt's hash: the role-flipped messages as sent."""
    return sha256_text(orjson.dumps([m.model_dump(exclude_none=True) for m in role_flip_messages(messages)]).decode())


def shard_of(record: dict, shards: int) -> int:
    return int(hashlib.sha256(record["item_id"].encode()).hexdigest(), 16) % shards


def write(path: Path, records: list[dict]) -> Path:
    """A results file as the probe writes it: each configuration line before its first record."""
    described: set[str] = set()
    data = b""
    for record in records:
        if record["model"] not in described:
            described.add(record["model"])
            data += config(record["model"])
        data += line(record)
    path.write_bytes(data)
    return path


@pytest.fixture
def sharded(tmp_path: Path) -> dict[str, Path]:
    """The same grid unsharded, as two shard files in a folder, and as the shards' concatenation in one file."""
    records = grid()
    folder = tmp_path / "sharded"
    folder.mkdir()
    shards = [write(folder / f"results.shard-{i + 1}-of-2.jsonl", [r for r in records if shard_of(r, 2) == i])
              for i in range(2)]
    (folder / "report.html").write_text("<html></html>")  # not a results file: a folder reads only *.jsonl
    (folder / ".results.shard-1-of-2.jsonl.compact-1.jsonl").write_text("torn")  # hidden: left alone
    cat = tmp_path / "cat.jsonl"
    cat.write_bytes(b"".join(s.read_bytes() for s in shards))
    return {"unsharded": write(tmp_path / "results.jsonl", records), "folder": folder, "shard1": shards[0],
            "shard2": shards[1], "cat": cat}


def stdout(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> str:
    assert main(list(argv)) == status, capsys.readouterr().err
    return capsys.readouterr().out


@pytest.mark.parametrize("flags", [["--json"], ["--format", "csv"], ["--format", "markdown"]])
def test_the_report_of_shards_is_the_unsharded_report(sharded: dict[str, Path], flags: list[str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    expected = stdout(capsys, "report", str(sharded["unsharded"]), *flags)
    assert len(json.loads(expected) if flags == ["--json"] else expected.splitlines()) >= 8  # 2 models x 2 x 2
    for args in ([sharded["folder"]], [sharded["shard1"], sharded["shard2"]], [sharded["cat"]],
                 [sharded["shard2"], sharded["shard1"]]):  # no key in two shards: the order does not matter
        got, want = stdout(capsys, "report", *map(str, args), *flags), expected
        if flags == ["--format", "markdown"]:  # the caveat's retry command names the files read
            assert got.startswith("> **Caveat:**") and all(str(a) in got.split("\n\n", 1)[0] for a in args)
            got, want = got.split("\n\n", 1)[1], want.split("\n\n", 1)[1]
        assert got == want


def test_the_report_table_names_every_file(sharded: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.chdir(sharded["folder"])
    out = stdout(capsys, "report", "results.shard-1-of-2.jsonl", "results.shard-2-of-2.jsonl")
    assert "userturn report: results.shard-1-of-2.jsonl results.shard-2-of-2.jsonl" in out and "org/m-8B" in out
    assert "userturn judge results.shard-1-of-2.jsonl results.shard-2-of-2.jsonl --judge-base-url" in out


@pytest.mark.parametrize("argv", [["export", "--format", "sft"], ["export", "--format", "preference"],
                                  ["export", "--format", "sft-human"], ["rerank", "--json"]])
def test_export_and_rerank_of_several_files_are_those_of_their_concatenation(
        sharded: dict[str, Path], argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    command, *flags = argv
    expected = stdout(capsys, command, str(sharded["cat"]), *flags)
    assert expected.strip() not in ("", "[]")
    assert stdout(capsys, command, str(sharded["folder"]), *flags) == expected
    assert stdout(capsys, command, str(sharded["shard1"]), str(sharded["shard2"]), *flags) == expected


def test_show_of_several_files_is_that_of_their_concatenation(sharded: dict[str, Path],
                                                              capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.chdir(sharded["cat"].parent)
    expected = stdout(capsys, "show", "cat.jsonl", "--model", "org/m-1B").splitlines()
    got = stdout(capsys, "show", "sharded", "--model", "org/m-1B").splitlines()
    assert got[0].strip() == "userturn show: sharded" and expected[0].strip() == "userturn show: cat.jsonl"
    assert got[1:] == expected[1:] and len(got) > 24  # 24 records of org/m-1B (and their retries) in the table
    # KEY after the files: the record whole, the same whichever way it is read
    key = record_key("org/m-8B", "gsm8k", "q3", "wrong_answer", 1.0, 1, "chat")
    one = stdout(capsys, "show", str(sharded["cat"]), key)
    assert key in one and stdout(capsys, "show", str(sharded["folder"]), key) == one
    assert stdout(capsys, "show", str(sharded["shard1"]), str(sharded["shard2"]), key) == one


def test_a_duplicate_key_in_two_files_counts_once_the_later_line_wins(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """By hand: a holds q1 genuine, q2 generic; b holds q3 genuine and q1 again, judged generic (later). Read a, b:
    q1 is generic -> 1 follow-up of 3 labelled (rate 1/3); read b, a: q1 is genuine -> 2 of 3."""
    def rec(item: str, label: str) -> dict:
        return {"key": record_key("m", "d", item, "none", 0.0, 0), "status": "ok", "config_fingerprint": "f" * 16,
                "model": "m", "dataset": "d", "item_id": item, "temperature": 0.0, "sample": 0, "seed": 0,
                "user_turn": "t", "label": label, "label_source": "judge",
                "judges": [{"judge": "j", "status": "ok", "label": label}]}
    head = ConfigLine(fingerprint="f" * 16, config={"model": "m"}).model_dump_json().encode() + b"\n"
    a = tmp_path / "a.jsonl"
    a.write_bytes(head + line(rec("q1", "genuine_followup")) + line(rec("q2", "generic")))
    b = tmp_path / "b.jsonl"
    b.write_bytes(head + line(rec("q3", "genuine_followup")) + line(rec("q1", "generic")))
    report = summarise_file([a, b])
    [g] = report.groups
    assert (g.records, g.n, g.items, g.followups, report.superseded) == (3, 3, 3, 1, 1)
    # one record per item: the interval is Wilson's at n = 3, p = 1/3
    p, n, z = 1 / 3, 3, Z95
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (
        1 + z * z / n)
    assert g.followup_rate == pytest.approx(1 / 3)
    assert (g.ci_low, g.ci_high) == (pytest.approx(centre - half), pytest.approx(centre + half))
    assert (round(g.ci_low, 4), round(g.ci_high, 4)) == (0.0615, 0.7923)
    assert summarise_file([b, a]).groups[0].followups == 2
    records, read = read_results([a, b])  # show / export / rerank: the same rule
    assert len(records) == 3 and records[record_key("m", "d", "q1", "none", 0.0, 0)].label == "generic"
    assert read.duplicates == 1
    err = capsys.readouterr().err
    assert main(["report", str(a), str(b), "--json"]) == 0
    assert "1 superseded lines" in capsys.readouterr().err + err


def test_a_folder_reads_the_judged_copy_in_place_of_its_input(sharded: dict[str, Path],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    folder = sharded["folder"]
    judged = folder / "results.shard-1-of-2.judged.jsonl"
    judged.write_bytes(sharded["shard1"].read_bytes())
    assert results_files(folder) == [judged, sharded["shard2"]]
    assert results_files(folder, "skip_judged") == [sharded["shard1"], sharded["shard2"]]
    assert results_files(folder, "all") == [sharded["shard1"], judged, sharded["shard2"]]  # by name
    assert results_files([sharded["shard1"], judged]) == [sharded["shard1"], judged]  # files: as named


@pytest.mark.parametrize("make, message", [
    (lambda t: [t / "missing.jsonl"], "results file not found: {t}/missing.jsonl"),
    (lambda t: [t / "empty"], "results folder {t}/empty: no results files (*.jsonl) in it"),
    (lambda t: [t / "judged-only"], "results folder {t}/judged-only: no results files that are not judged copies"),
    (lambda t: [t / "judged-only", t / "judged-only" / "x.judged.jsonl"], "is named twice"),
])
def test_bad_arguments_are_one_line(tmp_path: Path, make, message: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "judged-only").mkdir()
    (tmp_path / "judged-only" / "x.judged.jsonl").write_text("")
    with pytest.raises(UserError, match=message.format(t=tmp_path).replace("(", r"\(").replace(")", r"\)")
                       .replace("*", r"\*")):
        results_files(make(tmp_path), "skip_judged" if "judged" in message else "prefer_judged")


def test_a_bad_line_names_its_file_and_line(sharded: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    shard2 = sharded["shard2"]
    shard2.write_bytes(shard2.read_bytes() + b'{"key": 3}\n' + line(json.loads(shard2.read_text().splitlines()[1])))
    bad = len(shard2.read_text().splitlines()) - 1
    for argv in (["report"], ["show"], ["export", "--format", "sft"], ["rerank"]):
        command, *flags = argv
        assert main([command, str(sharded["folder"]), *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{shard2}:{bad}: not a userturn record" in err[0], (argv, err)


def test_two_configurations_of_one_key_across_files_as_within_one(tmp_path: Path) -> None:
    """The report keeps them in two rows; the record readers refuse the mix naming the later line."""
    one = next(r for r in grid() if r["status"] == "ok")
    a = write(tmp_path / "a.jsonl", [one])
    other = {**one, "config_fingerprint": "e" * 16}
    b = tmp_path / "b.jsonl"
    b.write_bytes(ConfigLine(fingerprint="e" * 16, config={"model": one["model"], "max_tokens": 9})
                  .model_dump_json().encode() + b"\n" + line(other))
    assert len(summarise_file([a, b]).groups) == len(summarise_file(write(tmp_path / "c.jsonl", [one, other])
                                                                    ).groups) == 2
    with pytest.raises(UserError, match=r"b\.jsonl:2: record .* was made with configuration e{16}"):
        read_results([a, b])


def ok_judge(request: httpx.Request) -> httpx.Response:
    """A judge that labels a turn mentioning an even item genuine, the others generic (deterministic)."""
    prompt = json.loads(request.content)["messages"][-1]["content"]
    label = "genuine_followup" if any(f"about q{i} " in prompt for i in range(0, 12, 2)) else "generic"
    return httpx.Response(200, json={"choices": [{"message": {"content": json.dumps({"rationale": "r",
                                                                                      "label": label})}}]})


def unjudged(records: list[dict]) -> list[dict]:
    return [{**r, "label": None, "label_source": None, "judges": [], "judge_status": None} for r in records]


def test_judge_a_folder_each_file_to_its_own_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = unjudged(grid()[:60])
    folder = tmp_path / "sharded"
    folder.mkdir()
    for i in range(2):
        write(folder / f"results.shard-{i + 1}-of-2.jsonl", [r for r in records if shard_of(r, 2) == i])
    whole = write(tmp_path / "results.jsonl", records)
    base = "http://judge.test/v1"
    judge = ["--judge-base-url", base, "--judge-model", "kw", "--no-progress"]
    with respx.mock(using="httpx", base_url=base) as mock:
        mock.get("/models").mock(return_value=httpx.Response(404))
        route = mock.post("/chat/completions").mock(side_effect=ok_judge)
        assert main(["judge", str(folder), *judge]) == 0
        asked = route.call_count
        err = capsys.readouterr().err
        newly = [int(n) for n in re.findall(r"newly judged (\d+) ", err)]
        assert len(newly) == 2 and all(newly) and sum(newly) == asked  # each file's own counts
        assert err.count("next: userturn report") == 1  # one for the command, not one per file
        assert main(["judge", str(whole), *judge]) == 0
        assert route.call_count == 2 * asked  # each generated turn judged once either way
        capsys.readouterr()
        assert sorted(p.name for p in folder.iterdir()) == [
            "results.shard-1-of-2.jsonl", "results.shard-1-of-2.judged.jsonl", "results.shard-2-of-2.jsonl",
            "results.shard-2-of-2.judged.jsonl"]
        # Again: a folder's judged copies are not judged again, and every key is done.
        assert main(["judge", str(folder), *judge]) == 0
        assert route.call_count == 2 * asked and "already done" in capsys.readouterr().err
        # --out with several inputs is a folder: X.judged.jsonl in it.
        out = tmp_path / "judged"
        assert main(["judge", str(folder / "results.shard-1-of-2.jsonl"), str(folder / "results.shard-2-of-2.jsonl"),
                     "--out", str(out), *judge]) == 0
    expected = stdout(capsys, "report", str(tmp_path / "results.judged.jsonl"), "--json")
    assert stdout(capsys, "report", str(folder), "--json") == expected  # the judged copies, in place of the inputs
    assert stdout(capsys, "report", str(out), "--json") == expected
    assert json.loads(expected)[0]["n"] > 0


def test_judge_refuses_two_inputs_with_one_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = unjudged(grid()[:4])
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = write(tmp_path / "a" / "r.jsonl", records[:2]), write(tmp_path / "b" / "r.jsonl", records[2:])
    judge = ["--judge-base-url", "http://judge.test/v1", "--judge-model", "kw"]
    assert main(["judge", str(a), str(b), "--out", str(tmp_path / "o"), *judge]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "would both be judged into" in err[0]
    (tmp_path / "afile").write_text("")
    assert main(["judge", str(a), str(b), "--out", str(tmp_path / "afile"), *judge]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err


def test_compact_rewrites_each_file_of_a_folder(sharded: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    before = stdout(capsys, "report", str(sharded["folder"]), "--json")
    assert summarise_file(results_files(sharded["folder"])).superseded > 0  # the retried errors
    assert main(["compact", str(sharded["folder"])]) == 0
    assert capsys.readouterr().err.count("userturn compact: ") == 2
    assert summarise_file(results_files(sharded["folder"])).superseded == 0
    assert stdout(capsys, "report", str(sharded["folder"]), "--json") == before


def test_the_html_report_and_the_run_printout_read_several_files(sharded: dict[str, Path], tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from rich.console import Console

    from userturn.report.run_view import print_run_report

    html = tmp_path / "r.html"
    assert main(["report", str(sharded["folder"]), "--html", str(html), "--json"]) == 0
    page = html.read_text()
    assert str(sharded["folder"]) in page and "org/m-8B" in page and "asks about" in page  # rows and examples
    capsys.readouterr()
    unsharded = print_run_report(Console(width=100, record=True), sharded["unsharded"])
    shards = print_run_report(Console(width=100, record=True), [sharded["shard1"], sharded["shard2"]])
    assert [g.model_dump() for g in shards] == [g.model_dump() for g in unsharded] and len(shards) == 8
