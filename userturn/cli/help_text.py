"""The examples under `userturn --help` (each command's own are its module's `EXAMPLES`; every line that starts with
`userturn` is a complete command line: tests/cli/test_cli_help.py parses each of them with the real parser)."""

from __future__ import annotations

TOP = """\
  userturn run smoke                       # the offline quick start: serve, probe, label, report
  userturn list                            # shipped manifests and experiments, datasets, perturbations
  userturn probe --manifest qwen3.5-9b --dataset gsm8k --limit 100 --out runs/q9b.jsonl
  userturn report runs/q9b.jsonl
Each command's --help ends with its own examples."""


def epilog(examples: str | None) -> str | None:
    """The `examples:` block of a help text (None for none)."""
    return None if examples is None else "examples:\n" + examples
