"""Looking at results: export, rerank, show."""
