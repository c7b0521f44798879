"""`userturn label`: blind labelling by people in the browser, each answer appended to a gold file as it is given."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from typing import TYPE_CHECKING

from userturn.cli.argtypes import non_negative_int, positive_int
from userturn.cli.paths import Paths
from userturn.cli.results_args import HELP
from userturn.core import aio
from userturn.core.errors import UserError

if TYPE_CHECKING:
    from userturn.judges.label_session import LabelSession


NAME = "label"
EXAMPLES = """\
  userturn label runs/q9b.judged.jsonl --out gold.jsonl --labeller ann
  # a second labeller: the same 200 records (same --seed), in another order
  userturn label runs/q9b.judged.jsonl --out gold.jsonl --labeller bob --n 200 --seed 0 --port 8765 --no-browser
Rerun the same command to resume: every answer is on disk as soon as it is given."""
PATHS = Paths()


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The `label` parser."""
    p = sub.add_parser(
        "label", help="label generated user turns by hand in the browser, blind (a gold file of people's labels)",
        description="Serve one page on 127.0.0.1 that shows a seeded sample of records one at a time, blind (the "
                    "conversation as probed and the user turn, never the model, temperature, perturbation or the "
                    "judge's label), to be labelled by key. Each answer is appended to --out and flushed as it is "
                    "given; rerunning resumes at the first record this labeller has not answered. The sample is "
                    "stratified over model x dataset x mode x perturbation x temperature x the judge's label, "
                    "--n shared out in proportion to each stratum's size; every labeller gets the same records "
                    "(same --seed) in an order of their own.")
    p.add_argument("results", nargs="+", metavar="RESULTS", help=HELP["prefer_judged"])
    p.add_argument("--out", required=True, metavar="GOLD.jsonl", help="the gold file answers are appended to")
    p.add_argument("--n", type=positive_int, default=200, help="records in the sample (all of them if fewer)")
    p.add_argument("--seed", type=int, default=0, help="the sample's seed (the same for every labeller)")
    p.add_argument("--labeller", default=None, metavar="NAME",
                   help="who is labelling (default: the login name); also seeds the order records are shown in")
    p.add_argument("--port", type=non_negative_int, default=0, help="port on 127.0.0.1 (0: a free one)")
    p.add_argument("--no-browser", action="store_true", help="print the page's address only, open no browser")
    return p


def default_labeller() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "labeller"


def can_open_browser() -> bool:
    """Whether `webbrowser` would open a graphical browser (on Linux without a display it may pick a text one)."""
    return not sys.platform.startswith("linux") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from userturn.cli.paths import output_file
    from userturn.core.results_files import describe, read_results, results_files
    from userturn.judges.label_session import LabelSession, draw_sample, labellable, labeller_order

    if args.port > 65535:
        raise UserError(f"--port {args.port}: a port is at most 65535")
    files = results_files(args.results, "prefer_judged")
    output_file(args.out, "--out")
    records, _ = read_results(files)
    if not labellable(records.values()):
        raise UserError(f"{describe(args.results)}: no ok record with a user turn to label")
    labeller = (args.labeller or default_labeller()).strip()
    if not labeller:
        raise UserError("--labeller: name someone")
    sample = draw_sample(records.values(), args.n, args.seed)
    session = LabelSession(labeller_order(sample, args.seed, labeller), Path(args.out), labeller)
    return aio.run(serve(session, args.port, open_browser=not args.no_browser and can_open_browser()))


async def serve(session: LabelSession, port: int, *, open_browser: bool) -> int:
    """Serve the page until interrupted (Ctrl-C: every answer given is already on disk)."""
    import webbrowser

    from userturn.judges.label_server import LabelServer

    server = LabelServer(session, port)
    await server.start()
    state = session.state()
    print(f"userturn label: {state['n']} records, {state['answered']} answered by {session.labeller}; answers go "
          f"to {session.out}", file=sys.stderr)
    print(server.url, flush=True)
    if open_browser:
        await asyncio.to_thread(webbrowser.open, server.url)
    print("open the address above in a browser; Ctrl-C ends the session (every answer given is saved)",
          file=sys.stderr, flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()
    return 0
