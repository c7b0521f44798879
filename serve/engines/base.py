"""What every engine definition provides (`EngineDefinition`) and what a launch hands it (`LaunchArgs`).

A definition is the only place that knows its engine: argv, readiness routes, startup timeout, container image and
where the server binary lives in it, how a SLURM line finds that binary, the installed check, model resolution,
manifest checks, parser spellings and the request-side traits (`userturn.core.engine_traits.EngineTraits`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from userturn.core.engine_traits import EngineTraits
from userturn.core.errors import UserError
from userturn.core.packaged import PKG_PREFIX, resolve

if TYPE_CHECKING:
    from userturn.serve.manifest import Manifest

Target = Literal["local", "slurm", "k8s"]  # where the argv runs: this machine, a SLURM job, a Kubernetes pod


@dataclass(frozen=True)
class LaunchArgs:
    """The values one replica's argv needs beyond the manifest (run-time words such as "$PORT" are strings)."""

    port: int | str
    host: str | None = None
    python: str = "python3"  # the interpreter for engines started as `python -m ...`
    model: str | None = None  # the resolved model (a local path), else the manifest's
    threads: int | str | None = None
    api_key: str | None = None
    node_rank: int | str | None = None
    dist_init_addr: str | None = None
    target: Target = "local"
    image: str | None = None  # the container image (target k8s), to find the binary in it


def flag_args(*pairs: tuple[str, object]) -> list[str]:
    """`flag value` for each pair with a value; a flag alone for True; nothing for None or False."""
    out: list[str] = []
    for flag, value in pairs:
        if value is True:
            out.append(flag)
        elif value is not None and value is not False:
            out += [flag, str(value)]
    return out


def key_flag(flag: str, key: str | None) -> list[str]:
    """`--flag=KEY` as one word, so a key that starts with '-' is never read as a flag by argparse."""
    return [] if key is None else [f"{flag}={key}"]


def registry() -> dict[str, EngineDefinition]:
    """The registry (`userturn.serve.engines.ENGINES`), imported when first needed (it imports this module)."""
    from userturn.serve.engines import ENGINES

    return ENGINES


def engines_with(attribute: str) -> str:
    """`engines 'a' and 'b'` (or `engine 'a'`): the kinds whose definition sets `attribute`, for one-line errors."""
    kinds = [repr(kind) for kind, engine in registry().items() if getattr(engine, attribute)]
    return f"engine{'s' if len(kinds) > 1 else ''} {' and '.join(kinds)}"


class EngineDefinition:
    """One engine kind. Subclasses set the class attributes and override what differs; instances are stateless."""

    kind: ClassVar[str]  # the manifest's `engine:` value
    summary: ClassVar[str]
    launches: ClassVar[bool] = True  # False: an endpoint given by URL (nothing to start)
    startup_timeout_s: ClassVar[float] = 600.0
    health_paths: ClassVar[tuple[str, ...]] = ("/health", "/v1/models")  # polled in order, each must answer 200
    k8s_health_path: ClassVar[str] = "/health"  # the pod's probes (no API key needed there)
    uses_gpus: ClassVar[bool] = False  # gpus default to tp x dp; CUDA_VISIBLE_DEVICES sliced per replica
    parallel: ClassVar[bool] = False  # tp/dp, mem_fraction_static, reasoning_parser, load_format
    multi_node: ClassVar[bool] = False  # nnodes > 1 (dist_init_addr)
    cpu_only_cpus: ClassVar[int] = 4  # a SLURM task's CPUs and --mem when the replica uses no GPU (the manifest's win)
    cpu_only_mem: ClassVar[str] = "16G"
    takes_api_key: ClassVar[bool] = True
    has_router: ClassVar[bool] = False  # an sglang-router can sit in front of its replicas
    serves_checkpoint: ClassVar[bool] = False  # serves a transformers checkpoint directory (`userturn train`)
    image: ClassVar[str | None] = None  # default container image, pinned to the version its flags were checked on
    reasoning_parsers: ClassVar[frozenset[str]] = frozenset()  # the engine's own spellings
    parser_aliases: ClassVar[dict[str, str]] = {}  # another engine's spelling -> this engine's
    sampler_flags: ClassVar[tuple[str, ...]] = ()  # launch flags that set sampling defaults (extra_args may override)
    traits: ClassVar[EngineTraits]

    # ----- manifest -----

    def check(self, m: Manifest) -> None:
        """Engine-specific manifest checks (ValueError, reported as one line naming the file and key)."""
        if m.command:
            return
        if not self.parallel:
            for field, unset in (("tp_size", 1), ("dp_size", 1), ("mem_fraction_static", None),
                                 ("reasoning_parser", None), ("load_format", None)):
                if getattr(m, field) != unset:
                    raise ValueError(f"{field} is only supported by {engines_with('parallel')}")
        if not self.multi_node:
            if m.nnodes != 1:
                raise ValueError(f"nnodes > 1 is only supported by {engines_with('multi_node')} (the others: one "
                                 "node, up to its GPUs)")
            if m.dist_init_addr is not None:
                raise ValueError(f"dist_init_addr is only supported by {engines_with('multi_node')}")
        parser = m.reasoning_parser
        if parser is not None and self.reasoning_parsers and parser not in self.reasoning_parsers:
            hint = self.parser_spelling(parser)
            raise ValueError(f"reasoning_parser: {parser!r} is not a parser of engine '{self.kind}'"
                             + (f" (its name for it: {hint!r})" if hint
                                else f"; its parsers: {', '.join(sorted(self.reasoning_parsers))}"))
        if m.api_key is not None and not self.takes_api_key:
            raise ValueError(f"api_key is not supported by engine '{self.kind}' (it takes no key)")
        if m.deterministic and not self.deterministic_flags():
            deterministic = [k for k, e in registry().items() if e.deterministic_flags()]
            raise ValueError(f"deterministic is only supported by engine {' and '.join(map(repr, deterministic))} "
                             f"(engine '{self.kind}' needs no switch for seeded sampling)")

    def parser_spelling(self, name: str) -> str | None:
        """This engine's spelling of a reasoning parser another engine calls `name` (e.g. vLLM's `openai_gptoss`
        for SGLang's `gpt-oss`), else None."""
        if name in self.parser_aliases:
            return self.parser_aliases[name]
        folded = {p.replace("-", "_").lower(): p for p in self.reasoning_parsers}
        return folded.get(name.replace("-", "_").lower())

    def deterministic_flags(self) -> list[str]:
        """The launch flags of `deterministic: true` ([] when the engine has no such switch)."""
        return []

    # ----- launch -----

    def argv(self, m: Manifest, a: LaunchArgs) -> list[str]:
        """The argv of one replica (one node of it) of `m`'s server."""
        raise UserError(f"{m.source or 'manifest'}: engine '{self.kind}' launches nothing")

    def installed(self, m: Manifest) -> None:
        """A one-line UserError naming what to install when the engine is missing here."""

    def resolve_model(self, m: Manifest) -> str | None:
        """The model to load, made local where the engine takes a file: a `pkg:` name becomes the file inside its
        installed package (one-line UserError if missing); None: the manifest's value as is."""
        return self.resolve_packaged(m)

    def resolve_packaged(self, m: Manifest) -> str | None:
        """A `pkg:` model as the file inside its installed package (one-line UserError if missing), else None; never
        downloads (what --dry-run shows)."""
        model = m.resolve_path(m.model) or ""
        if not model.startswith(PKG_PREFIX):
            return None
        where = f"{m.source}: model" if m.source else "model"
        try:
            path = Path(resolve(model)).expanduser()
        except UserError as exc:
            raise UserError(f"{where}: {exc}") from None
        if not path.is_file():
            raise UserError(f"{where}: file not found: {model}")
        return str(path)

    def resolves_model_in_job(self, m: Manifest) -> bool:
        """Whether a SLURM job resolves the model in its own environment (`userturn.serve.slurm_job`)."""
        return bool(m.model) and str(m.model).startswith(PKG_PREFIX)

    def engine_traits(self, m: Manifest) -> EngineTraits:
        """What this launch of `m` does with a request: the definition's traits; a custom command or extra_args that
        set sampling defaults make the server's defaults unknown."""
        if m.command or any(a.split("=", 1)[0] in self.sampler_flags for a in m.extra_args):
            return self.traits.model_copy(update={"server_sampler_defaults": None})
        return self.traits

    # ----- cluster -----

    def default_image(self, m: Manifest) -> str | None:
        """The image a Kubernetes pod runs when the manifest names none (None: the manifest must name one)."""
        return None if m.command else self.image
