"""The HTTP side of the probe: endpoints, the shared client, rate limits, redaction."""
