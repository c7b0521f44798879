"""Serving: manifests that launch SGLang / CPU engines, readiness, teardown, cluster targets."""
