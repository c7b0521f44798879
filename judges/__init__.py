"""Judges: label generated user turns, measure agreement, and report."""
