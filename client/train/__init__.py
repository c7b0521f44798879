"""LoRA training on probe results (the `train` extra)."""
