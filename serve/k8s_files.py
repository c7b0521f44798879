"""What a Kubernetes pod can read of a manifest's files: a hub id as is, a path in the model cache (the volume mounted
at the pod's cache folder; a path under `cache_host_path` is rewritten to where that folder is mounted), a chat
template file shipped in a ConfigMap. Any other path of the emitting machine (model, tokenizer, chat template) is
refused in one line naming the manifest key, so `--emit k8s` never writes a path the pod does not have.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from typing import Any

from userturn.core.errors import UserError
from userturn.serve.manifest import Manifest

FILES_DIR = "/etc/userturn"  # where the ConfigMap of shipped files is mounted (read-only)
FILES_VOLUME = "userturn-files"
MAX_SHIPPED_BYTES = 512 * 1024  # a ConfigMap holds at most 1 MiB; a chat template is a few KB


def _is_local(value: str, resolved: str) -> bool:
    """A path (absolute, ~, ./, ../) or a name that exists here; `pkg:` files are found in the pod's own packages."""
    if value.startswith("pkg:"):
        return False
    return value.startswith(("/", "~", "./", "../")) or value in (".", "..") or Path(resolved).exists()


def _under(path: PurePosixPath, folder: str) -> PurePosixPath | None:
    """`path` relative to `folder`, or None when it is not inside it."""
    try:
        return path.relative_to(PurePosixPath(folder))
    except ValueError:
        return None


def _in_cache(m: Manifest, key: str, path: PurePosixPath, cache: str) -> str | None:
    """The pod's path for a local path inside the model cache, else None; a cache that is an emptyDir is refused."""
    k = m.cluster.k8s
    where = m.source or "manifest"
    if k.cache_host_path and (rel := _under(path, k.cache_host_path)) is not None:
        return str(PurePosixPath(cache) / rel)
    if _under(path, cache) is None:
        return None
    if not (k.cache_pvc or k.cache_host_path):
        raise UserError(f"{where}: {key}: {path} is in the model cache ({cache}), which is an empty emptyDir in "
                        "the pod: set cluster.k8s.cache_pvc or cache_host_path to the volume that holds it")
    return str(path)


def _local(m: Manifest, value: str) -> PurePosixPath | None:
    resolved = m.resolve_path(value) or value
    if not _is_local(value, resolved):
        return None
    return PurePosixPath(os.path.normpath(os.path.abspath(resolved)))


def _pod_path(m: Manifest, key: str, value: str | None, cache: str) -> str | None:
    """`value` as the pod can read it (model, tokenizer), or a one-line UserError for a path of this machine."""
    path = _local(m, value) if value is not None else None
    if path is None:
        return value
    found = _in_cache(m, key, path, cache)
    if found is None:
        raise UserError(f"{m.source or 'manifest'}: {key}: {value} is a path on this machine, which the pod cannot "
                        f"read: use a hub id, or a path in the model cache ({cache} in the pod, from "
                        "cluster.k8s.cache_pvc or cache_host_path)")
    return found


def _file_key(name: str) -> str:
    """A ConfigMap key ([-._a-zA-Z0-9]+) from a file name, keeping its extension (SGLang reads .jinja / .json)."""
    return re.sub(r"[^-._a-zA-Z0-9]", "_", name).lstrip(".") or "chat_template"


def _chat_template(m: Manifest, files: dict[str, str], cache: str) -> str | None:
    """A chat template in the cache stays; a local file is shipped (added to `files`); a name passes as is."""
    value = m.chat_template
    path = _local(m, value) if value is not None else None
    if path is None:
        return value
    found = _in_cache(m, "chat_template", path, cache)
    if found is not None:
        return found
    where = f"{m.source or 'manifest'}: chat_template: {value}"
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"{where}: cannot read it to ship it to the pod ({exc.strerror or exc})") from None
    if len(data) > MAX_SHIPPED_BYTES:
        raise UserError(f"{where}: {len(data)} bytes is too large to ship in a ConfigMap (at most "
                        f"{MAX_SHIPPED_BYTES}): put it in the model cache ({cache} in the pod) instead")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{where}: not UTF-8 text, so it cannot be shipped in a ConfigMap") from None
    key = _file_key(path.name)
    files[key] = text
    return f"{FILES_DIR}/{key}"


def pod_manifest(m: Manifest, cache: str) -> tuple[Manifest, dict[str, str]]:
    """A copy of `m` whose model, tokenizer and chat template name what exists in a pod with the model cache mounted
    at `cache` (the name sent in requests unchanged), and the files to ship in the ConfigMap ({key: text})."""
    files: dict[str, str] = {}
    update = {"model": _pod_path(m, "model", m.model, cache),
              "tokenizer": _pod_path(m, "tokenizer", m.tokenizer, cache),
              "chat_template": _chat_template(m, files, cache), "served_model_name": m.request_model_name,
              "name": m.label}
    return m.model_copy(update=update), files


def config_map(name: str, ns: dict[str, str], labels: dict[str, str], files: dict[str, str]) -> dict[str, Any]:
    """The ConfigMap holding the shipped files (mounted at FILES_DIR by `mount_files`)."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **ns, "labels": labels},
            "data": dict(files)}


def mount_files(spec: dict[str, Any], config_map_name: str) -> None:
    """Mount the ConfigMap read-only at FILES_DIR in every container of a pod spec."""
    spec["volumes"].append({"name": FILES_VOLUME, "configMap": {"name": config_map_name}})
    for c in spec["containers"]:
        c["volumeMounts"].append({"name": FILES_VOLUME, "mountPath": FILES_DIR, "readOnly": True})
