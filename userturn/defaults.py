"""Default settings shared by every command: one place for retry, timeout, concurrency and token defaults.

The CLI help texts, the experiment schema, the judge and endpoint configs and the run builder all read these, so
`userturn probe`, `userturn run` and `userturn judge` cannot drift apart.
"""

from __future__ import annotations

# Endpoints (client.endpoint.EndpointConfig; probe, run, judges)
REQUEST_TIMEOUT_S = 300.0  # per-attempt deadline
MAX_RETRIES = 5  # retries after the first attempt (429/5xx/timeouts/dropped connections)
BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 30.0
PREPARE = "auto"  # where the probe prepares samples: a forked process for big runs (client.job_feed)
MIN_FORKED_SAMPLES = 2000  # auto forks for runs of this many samples or more (below, a fork buys nothing)
# Preparing processes per run, each on every n-th item. One preparing process costs about as much CPU per sample as
# the probe's own requests (~80 vs ~100 us at one sample per item); a second keeps the probe fed where the server
# shares the cores (2-core loopback benchmark: in-run 6,900 -> 8,100 req/s); more would wait on the probe itself.
PREPARING_PROCESSES = 2
# Items a preparing process takes through each step at a time (client.batch_steps): 1 is item by item.
PREPARE_BATCH = 64
API_KEY_ENV = "OPENAI_API_KEY"

# The probe (ProbeOptions)
CONCURRENCY = 64
MAX_TOKENS = 256
TEMPERATURES = (0.0,)
SAMPLES = 1
SEED = 0
ASSISTANT_TEMPERATURE = 0.0
ASSISTANT_MAX_TOKENS = 1024

# Judges (judges.llm_judge.JudgeConfig, the --judge-* flags, `judges:` in experiments)
JUDGE_MAX_TOKENS = 4096  # room for reasoning judges
MIN_JUDGE_MAX_TOKENS = 16  # the shortest verdict, {"rationale": "", "label": "generic"}, is about 15 tokens
JUDGE_TEMPERATURE = 0.0
JUDGE_REASKS = 2
JUDGE_CONCURRENCY = 16
