"""Prompts: chat templates, Harmony, stop strings, special tokens, chat mode, prompt replay."""
