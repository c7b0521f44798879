"""The sbatch script for a manifest, for any SLURM cluster and engine: one job (an array for `replicas: N`), one srun
task per node. At run time it picks a free port, resolves the CPU engine's model, starts the server, polls its
readiness routes and writes the endpoint JSON to `$USERTURN_ENDPOINT_DIR/<job>_<task>.json` (`--launcher slurm`).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Literal

from userturn.core.errors import UserError
from userturn.core.fingerprint import redacted_environment
from userturn.serve import router_follower
from userturn.serve.commands import ROUTER_HEALTH_PATHS, router_argv, server_argv
from userturn.serve.engines import engine_of
from userturn.serve.engines.base import engines_with
from userturn.serve.manifest import Manifest
from userturn.serve.secret_env import refuse_secret_env

# Words of the server argv that the script fills in at run time (each becomes "$VAR" in the srun line).
PLACEHOLDERS = {
    "__USERTURN_PY__": '"$USERTURN_PYTHON"',
    "__USERTURN_PORT__": '"$PORT"',
    "__USERTURN_MODEL__": '"$MODEL"',
    "__USERTURN_SERVED__": '"$SERVED"',
    "__USERTURN_THREADS__": '"$SLURM_CPUS_PER_TASK"',
    "__USERTURN_NODE_RANK__": '"$SLURM_NODEID"',
    "__USERTURN_DIST_ADDR__": '"$USERTURN_DIST_INIT_ADDR"',
    "__USERTURN_ROUTER_PORT__": '"$ROUTER_PORT"',
    "__USERTURN_API_KEY__": '"$USERTURN_API_KEY"',
    "__USERTURN_WORKERS__": "$WORKERS",  # unquoted on purpose: one argument per replica URL
}
DEFAULT_PYTHON = "python3"  # on the job's PATH (after the manifest's setup: lines); $USERTURN_PYTHON overrides it
CPUS_PER_GPU, MEM_GB_PER_GPU = 4, 64

# Polls the readiness routes on this node (no proxy) while the server's srun is alive, then writes the endpoint
# JSON atomically. Standard library only: it runs with any Python, including one without userturn.
WAIT_AND_PUBLISH = r"""
import json, os, sys, time, urllib.request
pid, port, paths, out = int(sys.argv[1]), os.environ["PORT"], sys.argv[2].split(","), sys.argv[3]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
key = os.environ.get("USERTURN_API_KEY")
headers = {"Authorization": "Bearer " + key} if key else {}
for path in paths:
    while True:
        try:
            os.kill(pid, 0)
        except OSError:
            sys.exit("userturn: the server exited before it was ready")
        try:
            with opener.open(urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers),
                             timeout=30) as r:
                if r.status == 200:
                    break
        except Exception:
            pass
        time.sleep(2)
e = os.environ
url = "http://%s:%s/v1" % (e["HEAD_NODE"], port)
info = {"base_url": url, "model": e["SERVED"], "job_id": e["JOB"],
        "array_task_id": int(e["TASK"]), "host": e["HEAD_NODE"], "port": int(port),
        "model_path": e["MODEL"], "restart_count": int(e.get("SLURM_RESTART_COUNT") or 0)}
with open(out + ".tmp", "w") as fh:
    json.dump(info, fh)
os.replace(out + ".tmp", out)
print("userturn: ready %s (model: %s); endpoint %s" % (url, e["SERVED"], out), flush=True)
""".strip()

# Task 0 of a job array with a router: wait until at least one replica wrote its endpoint (array tasks are not
# scheduled together), print the root URLs of those that did.
WAIT_FOR_REPLICAS = r"""
import json, os, sys, time
folder, job, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
paths = [os.path.join(folder, "%s_%d.json" % (job, i)) for i in range(n)]
while True:
    urls = []
    for p in paths:
        try:
            with open(p) as fh:
                urls.append(json.load(fh)["base_url"].rsplit("/v1", 1)[0])
        except (OSError, ValueError, KeyError):
            pass
    if urls:
        print(" ".join(urls))
        break
    time.sleep(2)
""".strip()

# Task 0, next to the router: replicas that appear later or move after a requeue are added to the router and a moved
# replica's old URL is removed (serve/router_follower.py, standard library only, run as `python -c`).
FOLLOW_REPLICAS = Path(router_follower.__file__).read_text(encoding="utf-8")
FOLLOW_END = "USERTURN_FOLLOWER_END"  # ends the here-document that carries it
assert FOLLOW_END not in FOLLOW_REPLICAS

FREE_PORT = "'import socket; s = socket.socket(); s.bind((\"\", 0)); print(s.getsockname()[1])'"


def slug(text: str) -> str:
    """A DNS-1123 name (lowercase, digits, '-'), at most 50 characters."""
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return (s or "model")[:50].rstrip("-")


def check_deployable(m: Manifest) -> None:
    """One-line UserError for a manifest that no cluster target can run as written."""
    where = m.source or "manifest"
    engine = engine_of(m)
    if not engine.launches:
        raise UserError(f"{where}: engine: '{m.engine}' has nothing to deploy")
    if m.nnodes > 1 and (not engine.multi_node or m.command):
        raise UserError(f"{where}: nnodes: multi-node needs {engines_with('multi_node')}")


def resources(m: Manifest) -> tuple[int, str]:
    """(cpus per task, --mem per node): the manifest's, else 4 CPUs / 64G per GPU, else the engine's CPU-only
    defaults (`EngineDefinition.cpu_only_cpus`, `cpu_only_mem`)."""
    s = m.cluster.slurm
    gpus = m.gpus_per_node
    cpus = s.cpus_per_task or (CPUS_PER_GPU * gpus if gpus else engine_of(m).cpu_only_cpus)
    mem = s.mem or (f"{MEM_GB_PER_GPU * gpus}G" if gpus else engine_of(m).cpu_only_mem)
    return cpus, mem


def _shell(argv: list[str]) -> str:
    """`argv` as one shell line, its placeholder words replaced by their "$VAR"."""
    line = shlex.join(argv)
    for word, var in PLACEHOLDERS.items():
        line = line.replace(word, var)
    return line


def _server_line(m: Manifest) -> str:
    """`srun ... bash -c '<server argv>'` with the run-time values as "$VAR"."""
    model = "__USERTURN_MODEL__" if not m.command else None  # every engine loads "$MODEL"
    argv = server_argv(m, port="__USERTURN_PORT__", host="0.0.0.0", python="__USERTURN_PY__", model=model,
                       threads="__USERTURN_THREADS__" if not engine_of(m).uses_gpus else None,
                       api_key="__USERTURN_API_KEY__" if m.api_key else None,
                       node_rank="__USERTURN_NODE_RANK__", dist_init_addr="__USERTURN_DIST_ADDR__", target="slurm")
    for flag in ("--served-model-name", "--alias"):  # the name the job resolved ($SERVED)
        if flag in argv and not m.command:
            argv[argv.index(flag) + 1] = "__USERTURN_SERVED__"
    return (f'srun --nodes={m.nnodes} --ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" '
            f"--kill-on-bad-exit=1 bash -c {shlex.quote(_shell(argv))} &")


def _router_lines(m: Manifest) -> list[str]:
    """Task 0 also runs the sglang-router on its node, in front of every replica's endpoint."""
    assert m.router is not None
    argv = router_argv(m, ["__USERTURN_WORKERS__"], port="__USERTURN_ROUTER_PORT__", python="__USERTURN_PY__")
    argv[argv.index("--host") + 1] = "0.0.0.0"
    port = str(m.router.port) if m.router.port else f'$("$USERTURN_PYTHON" -c {FREE_PORT})'
    return [
        'if [ "$TASK" = 0 ]; then  # the router: on this node, once a replica has written its endpoint',
        f'    WORKERS=$("$USERTURN_PYTHON" -c {shlex.quote(WAIT_FOR_REPLICAS)} "$ENDPOINT_DIR" "$JOB" {m.replicas})',
        f"    export ROUTER_PORT={port}",
        "    trap 'rm -f \"$ENDPOINT_FILE\" \"$ROUTER_FILE\"' EXIT",
        '    echo "userturn: router on $HEAD_NODE port $ROUTER_PORT for $WORKERS"',
        f"    {_shell(argv)} &",
        "    ROUTER=$!",
        f'    PORT="$ROUTER_PORT" "$USERTURN_PYTHON" -c "$WAIT_AND_PUBLISH" "$ROUTER" {",".join(ROUTER_HEALTH_PATHS)} '
        '"$ROUTER_FILE" || { kill "$SERVER"; exit 1; }',
        "    # replicas that start later (or move after a requeue) join the running router; the follower's source,",
        "    # verbatim (a quoted here-document expands nothing):",
        f"    FOLLOW_REPLICAS=$(cat <<'{FOLLOW_END}'",
        FOLLOW_REPLICAS.rstrip("\n"),
        FOLLOW_END,
        "    )",
        f'    "$USERTURN_PYTHON" -c "$FOLLOW_REPLICAS" "$ENDPOINT_DIR" "$JOB" {m.replicas} $WORKERS &',
        "fi",
    ]


def _model_lines(m: Manifest) -> list[str]:
    """MODEL / SERVED: fixed, or (CPU engine) resolved in the job: a local path, a package's GGUF, hub or cache."""
    model = m.resolve_path(m.model) or ""
    if engine_of(m).resolves_model_in_job(m):
        argv = ["-m", "userturn.serve.slurm_job", "resolve-model", "--engine", m.engine, "--model", model,
                "--served-model-name", m.request_model_name]
        if m.revision:
            argv += ["--revision", m.revision]
        return ["# the model: a local path, a GGUF file inside an installed package, or the hub (or its cache)",
                f'EXPORTS=$("$USERTURN_PYTHON" {shlex.join(argv)})', 'eval "$EXPORTS"']
    return [f"export MODEL={shlex.quote(model)} SERVED={shlex.quote(m.request_model_name)}"]


def _hub_lines(m: Manifest) -> list[str]:
    """The hub cache and offline mode the manifest sets (cluster.slurm.hf_home / hf_hub_offline), said in a comment
    either way; what is unset is left to the job's own environment, never taken from the shell that emits."""
    s = m.cluster.slurm
    lines = []
    if s.hf_home:
        lines += ["# hub cache: cluster.slurm.hf_home", f"export HF_HOME={shlex.quote(s.hf_home)}"]
    else:
        lines.append("# hub cache: the job's HF_HOME, else ~/.cache/huggingface (set cluster.slurm.hf_home to choose)")
    if s.hf_hub_offline is not None:
        flag = "1" if s.hf_hub_offline else "0"
        lines += ["# offline mode: cluster.slurm.hf_hub_offline",
                  f"export HF_HUB_OFFLINE={flag} TRANSFORMERS_OFFLINE={flag}"]
    else:
        lines.append("# offline mode: the job's HF_HUB_OFFLINE (set cluster.slurm.hf_hub_offline to choose)")
    return lines


HOME_WORD = "__USERTURN_HOME__"  # a manifest path under ~ stays under the job's $HOME, not the emitting user's


def _job_home(m: Manifest) -> Manifest:
    """`m` with its `~/` paths (model, tokenizer, chat template) written as HOME_WORD/..., where the rest needs no
    shell quoting (HOME_WORD becomes "$HOME" in the script); other values unchanged."""
    update = {}
    for key in ("model", "tokenizer", "chat_template"):
        value = getattr(m, key)
        if isinstance(value, str) and value.startswith("~/") and shlex.quote(value[2:]) == value[2:]:
            update[key] = f"{HOME_WORD}/{value[2:]}"
    if update and "model" in update:
        update["served_model_name"] = m.request_model_name  # the name sent in requests, as the manifest wrote it
    return m.model_copy(update=update) if update else m


def _submit_lines(m: Manifest) -> list[str]:
    """What to set before submitting, and the check that runs when the file is run by hand (`bash FILE`): it fails
    at once when the job could not work, else submits the file itself with sbatch. SLURM runs the script only once
    the job is allocated, so a check inside the job would come only after the queue."""
    needs: list[list[str]] = []  # per requirement: the variables any one of which meets it
    if m.api_key:
        needs.append(list(dict.fromkeys(["USERTURN_API_KEY", "USERTURN_API_KEY_FILE",
                                         *([m.api_key_env] if m.api_key == "env" and m.api_key_env else [])])))
    why = f"the key the server will require, api_key: {m.api_key}; the probe sends the same key"
    lines = ["# before submitting: " + ("; ".join(f"export {' or '.join(names)} ({why})" for names in needs) if needs
                                        else "nothing to set"),
             "# submit: bash THIS_FILE [sbatch options] checks that, then runs sbatch on this file (plain sbatch skips "
             "the check: the job then fails only once it starts)",
             'if [ -z "${SLURM_JOB_ID:-}" ]; then  # run by hand, not by SLURM: check, then submit']
    for names in needs:
        present = "".join(f"${{{n}:-}}" for n in names)
        lines.append(f'  [ -n "{present}" ] || {{ echo "userturn: set {names[0]} before submitting '
                     f'(export {names[0]}=...): the server requires an API key" >&2; exit 2; }}')
    lines += ['  command -v sbatch >/dev/null || { echo "userturn: sbatch not found: submit from a SLURM login node" '
              '>&2; exit 2; }', '  exec sbatch "$@" "$0"', "fi"]
    return lines


def render_slurm(m: Manifest, *, python: str | None = None, secrets: Literal["refuse", "redact", "keep"] = "refuse"
                 ) -> str:
    """The sbatch script (see the module docstring). Its Python is $USERTURN_PYTHON at run time, else `python`, else
    the manifest's `cluster.slurm.python`, else `python3` on the job's PATH: never a path of the emitting machine
    that the manifest or caller did not name. A literal secret in `env:` (`secret_env`) is refused (`--emit`),
    shown `[redacted]` (`--dry-run`) or kept (`--launcher slurm`, which writes the script mode 600)."""
    check_deployable(m)
    if secrets == "refuse":
        refuse_secret_env(m, "slurm")
    m = _job_home(m)
    s = m.cluster.slurm
    label = slug(m.label)
    py = python or s.python or DEFAULT_PYTHON
    if py.startswith("~/"):
        py = "$HOME/" + py[2:]  # expanded by the job, inside the double quotes below
    cpus, mem = resources(m)
    lines = ["#!/bin/bash", f"#SBATCH --job-name=userturn-{label}", f"#SBATCH --nodes={m.nnodes}",
             "#SBATCH --ntasks-per-node=1", f"#SBATCH --cpus-per-task={cpus}", f"#SBATCH --mem={mem}"]
    if m.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={m.gpus_per_node}")
    lines.append(f"#SBATCH --time={s.time}")
    lines += [f"#SBATCH --{key}={getattr(s, key)}" for key in ("partition", "account", "qos") if getattr(s, key)]
    if m.replicas > 1:
        lines.append(f"#SBATCH --array=0-{m.replicas - 1}")
    lines.append(f"#SBATCH --output=userturn-{label}-{'%A_%a' if m.replicas > 1 else '%j'}.log")  # one per task
    lines.append("#SBATCH --open-mode=append")  # a requeued job adds to its log instead of overwriting it
    lines += [f"#SBATCH {a}" for a in s.sbatch_args]
    lines += [
        f"# userturn serve --emit slurm: {m.label}. Once the server answers {', '.join(m.readiness_paths)}, the job",
        "# writes {base_url, model, job_id, ...} to $USERTURN_ENDPOINT_DIR/<job>_<task>.json and echoes the URL.",
        *_submit_lines(m), "", "set -eo pipefail", *s.setup, "set -u",
        f'export USERTURN_PYTHON="${{USERTURN_PYTHON:-{py}}}"',
    ]
    lines += _hub_lines(m)
    if m.api_key:
        fallback = f"${{{m.api_key_env}:-}}" if m.api_key == "env" else ""
        lines += ['# the key: the file --launcher slurm wrote (mode 600), else $USERTURN_API_KEY'
                  + (f", else ${m.api_key_env}" if m.api_key == "env" else ""),
                  'if [ -n "${USERTURN_API_KEY_FILE:-}" ]; then USERTURN_API_KEY=$(cat "$USERTURN_API_KEY_FILE"); fi',
                  f'export USERTURN_API_KEY="${{USERTURN_API_KEY:-{fallback}}}"  # api_key: {m.api_key}',
                  '[ -n "$USERTURN_API_KEY" ] || { echo "userturn: the server requires an API key: set USERTURN_API_KEY'
                  + (f" or {m.api_key_env}" if m.api_key == "env" else "") + '" >&2; exit 2; }']
    env = redacted_environment(m.env) if secrets == "redact" else m.env
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    endpoint_dir = f'"${{USERTURN_ENDPOINT_DIR:-{s.endpoint_dir or "$SLURM_SUBMIT_DIR/userturn-endpoints"}}}"'
    port = f"$(({m.port} + TASK))" if m.port else f'$("$USERTURN_PYTHON" -c {FREE_PORT})'
    lines += [
        "",
        'export JOB="${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}" TASK="${SLURM_ARRAY_TASK_ID:-0}"',
        f"ENDPOINT_DIR={endpoint_dir}",
        'mkdir -p "$ENDPOINT_DIR"',
        'ENDPOINT_FILE="$ENDPOINT_DIR/${JOB}_${TASK}.json" ROUTER_FILE="$ENDPOINT_DIR/${JOB}_router.json"',
        "trap 'rm -f \"$ENDPOINT_FILE\"' EXIT",
        "trap 'exit 143' TERM INT",
        'NODES=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))',
        'export HEAD_NODE="${NODES[0]}"',
        f"export PORT={port}  # the HTTP port on the first node, chosen at run time",
    ]
    if m.nnodes > 1:
        dist = str(s.dist_port) if s.dist_port else f'$("$USERTURN_PYTHON" -c {FREE_PORT})'
        lines.append(f'export USERTURN_DIST_INIT_ADDR="$HEAD_NODE:{dist}"')
    lines += _model_lines(m)
    lines += [
        'echo "userturn: job $JOB task $TASK on $HEAD_NODE port $PORT (model: $SERVED;'
        ' restart ${SLURM_RESTART_COUNT:-0})"',
        "",
        _server_line(m),
        "SERVER=$!",
        f"WAIT_AND_PUBLISH={shlex.quote(WAIT_AND_PUBLISH)}",
        f'"$USERTURN_PYTHON" -c "$WAIT_AND_PUBLISH" "$SERVER" {",".join(m.readiness_paths)} "$ENDPOINT_FILE" '
        '|| { wait "$SERVER"; exit 1; }',
        *(_router_lines(m) if m.router else []),
        'wait "$SERVER"',
    ]
    return "\n".join(lines).replace(HOME_WORD, '"$HOME"') + "\n"
