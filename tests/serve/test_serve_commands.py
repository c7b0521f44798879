"""Command building for every engine, GPU slicing across replicas, and `userturn serve --dry-run`."""

from __future__ import annotations

import shlex
import socket
from pathlib import Path

import pytest
import yaml

from userturn.cli import main
from userturn.core.errors import UserError
from userturn.serve.commands import (
    custom_argv,
    gpu_slices,
    replica_specs,
    root_url,
    router_spec,
    server_argv,
)
from userturn.serve.manifest import parse_manifest

FULL_SGLANG = {
    "engine": "sglang", "model": "Qwen/Qwen3.5-397B-A17B", "tokenizer": "Qwen/Qwen3.5-397B-A17B",
    "served_model_name": "qwen-big", "host": "0.0.0.0", "port": 30000, "tp_size": 16, "dp_size": 1, "nnodes": 2,
    "dist_init_addr": "10.0.0.1:50000", "mem_fraction_static": 0.85, "context_length": 32768, "dtype": "bfloat16",
    "seed": 7, "chat_template": "/t/chat.jinja", "reasoning_parser": "qwen3", "trust_remote_code": True,
    "load_format": "dummy", "extra_args": ["--enable-metrics"],
}


def flags(argv: list[str]) -> dict[str, str | None]:
    """`--flag value` / bare `--flag` pairs of an argv (after the module)."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        if argv[i].startswith("-"):
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[argv[i]] = argv[i + 1]
                i += 2
                continue
            out[argv[i]] = None
        i += 1
    return out


def test_sglang_flags_exactly() -> None:
    m = parse_manifest(FULL_SGLANG)
    argv = server_argv(m, port=30000, python="python", node_rank=1)
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    assert argv == [
        "python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3.5-397B-A17B",
        "--tokenizer-path", "Qwen/Qwen3.5-397B-A17B", "--host", "0.0.0.0", "--port", "30000", "--tp-size", "16",
        "--dp-size", "1", "--mem-fraction-static", "0.85", "--context-length", "32768", "--dtype", "bfloat16",
        "--random-seed", "7", "--chat-template", "/t/chat.jinja", "--reasoning-parser", "qwen3",
        "--trust-remote-code", "--load-format", "dummy", "--nnodes", "2", "--node-rank", "1",
        "--dist-init-addr", "10.0.0.1:50000", "--sampling-defaults", "openai", "--served-model-name", "qwen-big",
        "--enable-metrics",
    ]


def test_sglang_minimal_omits_unset_options() -> None:
    m = parse_manifest({"engine": "sglang", "model": "m/x"})
    f = flags(server_argv(m, port=1234, python="python")[3:])
    assert f["--served-model-name"] == "m/x" and f["--port"] == "1234" and f["--dtype"] == "auto"
    for absent in ("--nnodes", "--node-rank", "--dist-init-addr", "--load-format", "--trust-remote-code",
                   "--random-seed", "--mem-fraction-static", "--reasoning-parser", "--chat-template"):
        assert absent not in f


def test_sglang_multinode_needs_dist_init_addr() -> None:
    m = parse_manifest({**FULL_SGLANG, "dist_init_addr": None})
    with pytest.raises(UserError, match="dist_init_addr"):
        server_argv(m, port=1)


def test_vllm_flags_exactly() -> None:
    m = parse_manifest({"engine": "vllm", "model": "Qwen/Qwen3-8B", "served_model_name": "q", "tp_size": 4,
                        "dp_size": 2, "mem_fraction_static": 0.8, "context_length": 8192, "dtype": "bfloat16",
                        "seed": 3, "reasoning_parser": "qwen3", "trust_remote_code": True, "revision": "main",
                        "extra_args": ["--enable-prefix-caching"]})
    assert server_argv(m, port=9000) == [
        "vllm", "serve", "Qwen/Qwen3-8B", "--revision", "main", "--host", "127.0.0.1", "--port", "9000",
        "--tensor-parallel-size", "4", "--data-parallel-size", "2", "--gpu-memory-utilization", "0.8",
        "--max-model-len", "8192", "--dtype", "bfloat16", "--seed", "3", "--reasoning-parser", "qwen3",
        "--trust-remote-code", "--generation-config", "vllm", "--served-model-name", "q",
        "--enable-prefix-caching"]


def test_vllm_dry_run_prints_vllm_serve(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "qwen3.5-9b-vllm", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("# qwen3.5-9b-vllm-r0: ready when /health then /v1/models answer 200 on http://127.0.0.1:")
    argv = shlex.split(out[1])
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3.5-9B"]
    assert argv[argv.index("--max-model-len") + 1] == "32768" and argv[argv.index("--served-model-name") + 1] == \
        "qwen3.5-9b"


def test_api_key_flags_and_dry_run_never_shows_a_key(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for engine in ("sglang", "vllm"):  # argparse: one word, so a key starting with '-' is never a flag
        argv = server_argv(parse_manifest({"engine": engine, "model": "m.gguf", "api_key": "generate"}), port=1,
                           api_key="-k3y")
        assert "--api-key=-k3y" in argv, engine
    argv = server_argv(parse_manifest({"engine": "llamacpp", "model": "m.gguf", "api_key": "generate"}), port=1,
                       api_key="-k3y")  # llama.cpp's parser takes the next word as the value, whatever it is
    assert argv[argv.index("--api-key") + 1] == "-k3y"
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump({"engine": "vllm", "model": "x", "api_key": "generate"}))
    assert main(["serve", str(p), "--dry-run"]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert "'--api-key=<generated at launch>'" in line


def test_cpu_engine_argv(tmp_path: Path) -> None:
    m = parse_manifest({"engine": "transformers", "model": "/models/tiny", "served_model_name": "tiny", "seed": 3,
                        "context_length": 2048, "dtype": "bfloat16", "chat_template": "/t.jinja",
                        "tokenizer": "/tok", "trust_remote_code": True})
    argv = server_argv(m, port=8000, python="py", threads=2)
    assert argv[:5] == ["py", "-m", "userturn.serve.cpu_engine", "--model", "/models/tiny"]
    f = flags(argv[3:])
    assert f == {"--model": "/models/tiny", "--tokenizer": "/tok", "--host": "127.0.0.1", "--port": "8000",
                 "--served-model-name": "tiny", "--dtype": "bfloat16", "--seed": "3", "--context-length": "2048",
                 "--chat-template": "/t.jinja", "--trust-remote-code": None, "--threads": "2"}
    assert server_argv(m, port=8000, model="/cache/tiny")[4] == "/cache/tiny"


def test_cpu_engine_argv_parses_in_the_engine() -> None:
    """What the launcher builds is exactly what the engine's argparse accepts."""
    from userturn.serve.cpu_engine import parse_args

    m = parse_manifest({"engine": "transformers", "model": "/m", "seed": 1, "context_length": 99, "port": 5})
    cfg = parse_args(server_argv(m, port=5, threads=1)[3:])
    assert (cfg.model, cfg.port, cfg.seed, cfg.context_length, cfg.threads, cfg.name) == ("/m", 5, 1, 99, 1, "/m")


def test_llamacpp_argv_on_cpu_unless_gpus(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"")
    m = parse_manifest({"engine": "llamacpp", "model": str(gguf), "served_model_name": "q", "context_length": 4096,
                        "seed": 1})
    argv = server_argv(m, port=8080)
    assert argv[:3] == ["llama-server", "-m", str(gguf)]
    f = flags(argv)
    assert f["--alias"] == "q" and f["--ctx-size"] == "4096" and f["--seed"] == "1" and "--jinja" in f
    assert "--n-gpu-layers" not in f  # no GPUs unless the manifest asks
    assert f["--n-gpu-layers"] == "999" if (f := flags(server_argv(m.model_copy(update={"gpus": 1}), port=1))) else 0
    hub = parse_manifest({"engine": "llamacpp", "model": "unsloth/Qwen3-0.6B-GGUF:Q4_K_M"})
    argv = server_argv(hub, port=1)
    assert argv[1:3] == ["-hf", "unsloth/Qwen3-0.6B-GGUF:Q4_K_M"] and "--n-gpu-layers" not in argv


def test_custom_command_placeholders() -> None:
    m = parse_manifest({"engine": "sglang", "model": "org/m", "served_model_name": "m",
                        "command": ["vllm", "serve", "{model}", "--port", "{port}", "--host", "{host}",
                                    "--served-model-name", "{served_model_name}", '{"json": {"kept": 1}}']})
    assert custom_argv(m, port=9) == ["vllm", "serve", "org/m", "--port", "9", "--host", "127.0.0.1",
                                      "--served-model-name", "m", '{"json": {"kept": 1}}']
    assert server_argv(m, port=9)[0] == "vllm"
    assert m.readiness_paths == ("/v1/models",)


def test_external_has_no_command() -> None:
    m = parse_manifest({"engine": "external", "base_url": "http://x/v1"})
    with pytest.raises(UserError, match="launches nothing"):
        server_argv(m, port=1)


def test_gpu_slices_per_replica() -> None:
    m = parse_manifest({"engine": "sglang", "model": "x", "tp_size": 2, "replicas": 3})
    assert gpu_slices(m, None) == ["0,1", "2,3", "4,5"]
    assert gpu_slices(m, "4,5,6,7,0,1") == ["4,5", "6,7", "0,1"]
    with pytest.raises(UserError, match="need 6 GPUs, CUDA_VISIBLE_DEVICES lists 4"):
        gpu_slices(m, "0,1,2,3")
    explicit = parse_manifest({"engine": "sglang", "model": "x", "gpu_ids": [3, 1], "replicas": 2})
    assert gpu_slices(explicit, "0") == ["3", "1"]
    single = parse_manifest({"engine": "sglang", "model": "x", "tp_size": 8})
    assert gpu_slices(single, None) == [None], "one replica keeps the inherited CUDA_VISIBLE_DEVICES"
    cpu = parse_manifest({"engine": "transformers", "model": "x", "replicas": 2})
    assert gpu_slices(cpu, None) == [None, None]


def test_replica_specs_distinct_ports_devices_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    m = parse_manifest({"engine": "sglang", "model": "x", "replicas": 2, "env": {"A": "1"}, "name": "q"})
    specs = replica_specs(m, [31000, 31001], python="python")
    assert [s.port for s in specs] == [31000, 31001]
    assert [s.env for s in specs] == [{"A": "1", "CUDA_VISIBLE_DEVICES": "0"}, {"A": "1", "CUDA_VISIBLE_DEVICES": "1"}]
    assert [s.name for s in specs] == ["q-r0", "q-r1"]
    assert flags(specs[1].argv)["--port"] == "31001"
    cpu = parse_manifest({"engine": "transformers", "model": "x", "replicas": 2})
    assert [flags(s.argv)["--threads"] for s in replica_specs(cpu, [1, 2], cpu_count=8)] == ["4", "4"]


def test_router_command() -> None:
    m = parse_manifest({"engine": "sglang", "model": "x", "replicas": 2, "router": {"policy": "round_robin"}})
    specs = replica_specs(m, [31000, 31001], python="python")
    r = router_spec(m, specs, 32000, python="python")
    assert r.argv == ["python", "-m", "sglang_router.launch_router", "--worker-urls", "http://127.0.0.1:31000",
                      "http://127.0.0.1:31001", "--host", "127.0.0.1", "--port", "32000", "--policy", "round_robin"]


def test_root_url_uses_loopback_for_wildcards() -> None:
    assert root_url("0.0.0.0", 5) == "http://127.0.0.1:5"
    assert root_url("::1", 5) == "http://[::1]:5"
    assert root_url("node7", 5) == "http://node7:5"


def free_ports(n: int) -> int:
    """A base port with n consecutive free ports (fixed ports in tests would collide with other processes)."""
    from userturn.serve.process import pick_ports, port_is_free

    for _ in range(50):
        base = pick_ports("127.0.0.1", 0, 1)[0]
        if base + n <= 65535 and all(port_is_free("127.0.0.1", base + i) for i in range(n)):
            return base
    raise RuntimeError("no block of free ports")


def manifest_file(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_dry_run_prints_quoted_commands_with_env(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = free_ports(2)
    p = manifest_file(tmp_path, {"engine": "sglang", "model": "/models/my model", "port": base, "replicas": 2,
                                 "env": {"NCCL_DEBUG": "INFO"}, "load_format": "dummy", "name": "demo"})
    assert main(["serve", str(p), "--dry-run"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    commands = [line for line in out if not line.startswith("#")]
    assert len(commands) == 2
    first = shlex.split(commands[0])
    assert first[:2] == ["CUDA_VISIBLE_DEVICES=0", "NCCL_DEBUG=INFO"]
    assert first[3:5] == ["-m", "sglang.launch_server"]
    assert "'/models/my model'" in commands[0], "arguments are shell-quoted"
    assert flags(first)["--port"] == str(base) and flags(shlex.split(commands[1]))["--port"] == str(base + 1)
    assert shlex.split(commands[1])[0] == "CUDA_VISIBLE_DEVICES=1"
    assert out[0] == f"# demo-r0: ready when /health_generate then /v1/models answer 200 on http://127.0.0.1:{base}"


def test_dry_run_port_in_use_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = manifest_file(tmp_path, {"engine": "sglang", "model": "x", "port": port})
        assert main(["serve", str(p), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"userturn: error: port {port} on 127.0.0.1 is already in use ({p}: port)"


def test_dry_run_external_and_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = manifest_file(tmp_path, {"engine": "external", "base_url": "http://h:1/v1"})
    assert main(["serve", str(p), "--dry-run"]) == 0
    assert "nothing to launch" in capsys.readouterr().out
    bad = manifest_file(tmp_path, {"engine": "sglang", "model": "x", "tpsize": 2})
    assert main(["serve", str(bad), "--dry-run"]) == 2
    assert capsys.readouterr().err.strip() == f"userturn: error: {bad}: tpsize: unknown key"


def test_out_without_emit_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = manifest_file(tmp_path, {"engine": "sglang", "model": "x"})
    assert main(["serve", str(p), "--out", str(tmp_path / "x")]) == 2
    assert "--out goes with --emit" in capsys.readouterr().err


def test_dry_run_with_router(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = free_ports(3)
    p = manifest_file(tmp_path, {"engine": "sglang", "model": "x", "port": base, "replicas": 2, "name": "rt",
                                 "router": {"port": base + 2, "policy": "cache_aware"}})
    assert main(["serve", str(p), "--dry-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    router = shlex.split(lines[-1])
    assert lines[-2] == f"# rt-router: ready when /health then /v1/models answer 200 on http://127.0.0.1:{base + 2}"
    assert router[1:3] == ["-m", "sglang_router.launch_router"]
    i = router.index("--worker-urls")
    assert router[i + 1:i + 3] == [f"http://127.0.0.1:{base}", f"http://127.0.0.1:{base + 1}"]
    assert flags(router[i + 3:]) == {"--host": "127.0.0.1", "--port": str(base + 2), "--policy": "cache_aware"}


def test_multinode_dry_run_prints_one_command_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    """The shipped 397B manifest leaves node 0's address to the cluster: the dry run names it as a placeholder."""
    assert main(["serve", "qwen3.5-397b-a17b", "--dry-run"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    commands = [shlex.split(line) for line in out if not line.startswith("#")]
    assert len(commands) == 2
    ports = set()
    for rank, argv in enumerate(commands):
        f = flags(argv[argv.index("-m") + 2:])
        assert (f["--nnodes"], f["--node-rank"], f["--dist-init-addr"]) == ("2", str(rank), "<node0-host>:<dist-port>")
        ports.add(f["--port"])
    assert len(ports) == 1
    assert out[0].startswith("# qwen3.5-397b-a17b: 2 nodes; run each line on its own node, <node0-host>:<dist-port> "
                             "replaced by node 0's address")
    assert out[3] == "# qwen3.5-397b-a17b-node1: joins node 0 (no HTTP server of its own)"
    assert all(argv[-1] == "--api-key=<generated at launch>" for argv in commands)  # a placeholder, as on one node


def test_multinode_dry_run_uses_the_manifest_address(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = manifest_file(tmp_path, {**FULL_SGLANG, "nnodes": 3, "gpus": 48})
    assert main(["serve", str(p), "--dry-run"]) == 0
    out = capsys.readouterr().out
    commands = [shlex.split(line) for line in out.splitlines() if not line.startswith("#")]
    assert [flags(c[c.index("-m") + 2:])["--node-rank"] for c in commands] == ["0", "1", "2"]
    assert all(flags(c[c.index("-m") + 2:])["--dist-init-addr"] == "10.0.0.1:50000" for c in commands)
    assert "<node0-host>" not in out and "node 0 at 10.0.0.1:50000" in out.splitlines()[0]
