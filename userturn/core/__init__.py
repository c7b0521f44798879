"""The shared core: what every layer may import; it imports nothing else of userturn."""
