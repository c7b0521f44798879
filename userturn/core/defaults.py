"""Default settings shared by every command (CLI help, endpoint and judge configs, `ProbeOptions`), so `probe`,
`run` and `judge` cannot drift apart."""

from __future__ import annotations

# Endpoints (client.http.endpoint.EndpointConfig; probe, run, judges)
REQUEST_TIMEOUT_S = 300.0  # per-attempt deadline
MAX_RETRIES = 5  # retries after the first attempt (429/5xx/timeouts/dropped connections)
BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 30.0
# Endpoint health (client.http.health): a run stops when nothing was answered for this many request timeouts (while
# the first attempts of enough distinct requests in a row timed out), after 503s with Retry-After for this long (a
# server still loading), or after nothing but 429s for this long (waits included).
HUNG_AFTER_TIMEOUTS = 3.0
LOADING_MAX_S = 600.0
THROTTLED_MAX_S = 300.0
API_KEY_ENV = "OPENAI_API_KEY"

# The probe (userturn.core.options.ProbeOptions: the options a probe runs with)
CONCURRENCY = 64
MAX_TOKENS = 256
TEMPERATURES = (0.0,)
SAMPLES = 1
SEED = 0
ASSISTANT_TEMPERATURE = 0.0
ASSISTANT_MAX_TOKENS = 1024

# Judges (judges.llm_judge.JudgeConfig, the --judge-* flags, `judges:` in experiments)
JUDGE_PROMPT = "judge_v3"  # the packaged prompt judges use unless told otherwise (judges/prompts/)
JUDGE_MAX_TOKENS = 4096  # room for reasoning judges
MIN_JUDGE_MAX_TOKENS = 16  # the shortest verdict, {"rationale": "", "label": "generic"}, is about 15 tokens
JUDGE_TEMPERATURE = 0.0
JUDGE_REASKS = 2
JUDGE_CONCURRENCY = 16
