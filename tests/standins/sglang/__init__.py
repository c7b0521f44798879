"""A stand-in for the `sglang` package (no GPU in CI): only `python -m sglang.launch_server`, see launch_server."""
