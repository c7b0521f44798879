"""A command is one module of userturn/cli/ and its line in `cli.commands.COMMANDS`: each registered module exports
the whole contract, names the parser it adds, and no module with a parser is left out of the registry."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from userturn.cli import build_parser
from userturn.cli.commands import COMMANDS, REQUIRED
from userturn.cli.paths import Paths

CLI = Path(__file__).resolve().parents[2] / "userturn" / "cli"


def test_every_registered_command_module_exports_the_contract() -> None:
    names = [module.NAME for module in COMMANDS]
    assert len(set(names)) == len(names)
    for module in COMMANDS:
        missing = [attr for attr in REQUIRED if not hasattr(module, attr)]
        assert not missing, (module.__name__, missing)
        assert isinstance(module.PATHS, Paths) and module.EXAMPLES.strip(), module.__name__
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == names  # `--help` lists them in the registry's order
    for module in COMMANDS:
        assert sub.choices[module.NAME].get_default("func") is module.run


def test_no_module_with_a_parser_is_left_out_of_the_registry() -> None:
    registered = {Path(module.__file__ or "").name for module in COMMANDS}
    for path in sorted(CLI.glob("*.py")):
        tree = ast.parse(path.read_text())
        defines = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        if "add_parser" in defines:
            assert path.name in registered, f"{path.name} defines add_parser but is not in cli.commands.COMMANDS"


def test_every_option_has_its_flag_generated_from_its_declaration() -> None:
    """A new `Options` field is a probe flag without another line: `--NAME`, its type and bounds, its help."""
    from userturn.cli.option_flags import SPELLED_OTHERWISE, flag_of
    from userturn.cli.probe import flag_layer
    from userturn.core.options import Options

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    probe = sub.choices["probe"]
    flags = {action.dest: action for action in probe._actions}
    for name in Options.names():
        if name in SPELLED_OTHERWISE or not flag_of(name).flag:
            continue
        action = flags[name]
        assert action.option_strings == ["--" + name.replace("_", "-")], name
        assert Options.model_fields[name].description in (action.help or ""), name
    args = probe.parse_args(["--base-url", "http://127.0.0.1:9/v1", "--dataset", "d", "--out", "o", "--samples", "3",
                             "--top-p", "0.5", "--top-k", "-1", "--send-stop-token-ids", "--renderer", "harmony",
                             "--request-timeout", "9", "--temperature", "0", "--temperature", "1"])
    assert flag_layer(args).set_values() == {"renderer": "harmony", "temperatures": [0.0, 1.0], "samples": 3,
                                             "top_p": 0.5, "top_k": -1, "send_stop_token_ids": True,
                                             "request_timeout": 9.0}


def test_a_generated_flag_refuses_a_value_outside_the_options_bounds(capsys) -> None:
    import pytest

    for flag, value, words in (("--top-p", "1.5", "must be above 0 and at most 1, got 1.5"),
                               ("--samples", "0", "must be at least 1, got 0"),
                               ("--min-p", "2", "must be 0 to 1, got 2"), ("--rpm", "0", "must be positive")):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["probe", "--dataset", "d", "--out", "o", flag, value])
        assert f"argument {flag}: {words}" in capsys.readouterr().err
