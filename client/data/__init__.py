"""Datasets: the item model, JSONL scanning, lazy loading, and the named loaders."""
