"""Stand-ins for sbatch, squeue and scancel on PATH (a SLURM that runs each job as a local process)."""

from __future__ import annotations

import os
from pathlib import Path

SBATCH = r"""#!/bin/bash
for a in "$@"; do
    case "$a" in
        --output=*) out="${a#--output=}";; --chdir=*) dir="${a#--chdir=}";; --export=ALL,*) env="${a#--export=ALL,}";;
    esac
    script="$a"
done
echo "$@" > "$FAKE/sbatch.args"
n=$(sed -n 's/^#SBATCH --array=1-\([0-9]*\)$/\1/p' "$script")
for i in $(seq 1 "$n"); do
    log="${out//%A/77}"; log="${log//%a/$i}"
    (cd "$dir" && env "$env" SLURM_ARRAY_JOB_ID=77 SLURM_ARRAY_TASK_ID="$i" bash "$script" >> "$log" 2>&1) \
        < /dev/null > /dev/null 2>&1 &
    echo "$i $!" >> "$FAKE/pids"
done
echo "77;cluster"
"""


SQUEUE = r"""#!/bin/bash
while read -r i pid; do kill -0 "$pid" 2>/dev/null && echo "77_$i|RUNNING|None"; done < "$FAKE/pids"
exit 0
"""


SCANCEL = r"""#!/bin/bash
echo "$@" >> "$FAKE/scancel.args"
while read -r i pid; do pkill -TERM -P "$pid"; done < "$FAKE/pids"
"""


def fake_slurm(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """(the stand-ins' folder, the environment that puts them first on PATH)."""
    fake, bin_dir = tmp_path / "fake", tmp_path / "bin"
    fake.mkdir()
    bin_dir.mkdir()
    for name, text in (("sbatch", SBATCH), ("squeue", SQUEUE), ("scancel", SCANCEL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (fake / "pids").touch()
    return fake, {**os.environ, "OPENAI_API_KEY": "", "FAKE": str(fake), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
