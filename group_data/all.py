"""Defaults for every GPU class. A class file's name replaces the name here whole
(pyinfra merges group data by top-level name), so keep nested tables in one place.

Spec reference: README.md ("Spec reference"), generated from fleet/spec.py.
"""

# How long the rollout waits for /health and how it reports progress.
readiness = {
    "load_timeout_s": 1200,  # a 27B load plus CUDA graph capture; hangs end here
    "poll_interval_s": 0.5,  # polled on the host; a crash is seen within one poll
    "progress_every_s": 15,
    "workload_release_timeout_s": 120,
}

# The chat completion that must return text before a rollout counts as done.
smoke = {
    "prompt": "Say hello in one short sentence.",
    "max_tokens": 16,
    "timeout_s": 120,
}
