"""Runs made of probe runs: experiments, post-training runs, target sessions (typed; no argparse)."""
