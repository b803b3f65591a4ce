"""Defaults for every GPU class. A class file's name replaces the name here whole
(pyinfra merges group data by top-level name), so keep nested tables in one place.

Spec reference: docs/spec.md, generated from fleet/spec/.
"""

# How long the rollout waits for /health and how it reports progress.
readiness = {
    "load_timeout_s": 1200,  # a 27B load plus CUDA graph capture; hangs end here
    "poll_interval_s": 0.5,  # polled on the host; a crash is seen within one poll
    "progress_every_s": 15,
    "workload_release_timeout_s": 120,
}

# How many hosts of a class restart at once: the canary (its first host in inventory order) goes
# alone; after its gate and smoke test pass, at most this many (a count, or a percentage of the
# class's hosts: "25%"). The first failure stops the class; the rest stay as they are.
rolling = {"max_unavailable": 1}

# The canary analysis (docs/spec.md, `canary`): after the canary's smoke test, before any other host of its
# class takes its turn, it serves this load straight from its host (out of smg where smg routes the class);
# its output tokens/s and accept length are held against the make tune record (tuning/<class>.json) for the
# new spec's block size at this concurrency, else the same load on the canary just before its turn (the old
# spec). Below either fraction of the baseline it rolls back and its class stops. Seconds on a GPU.
canary = {
    "analysis": True,  # false: the smoke test alone
    "requests": 16,
    "concurrency": 4,
    "max_tokens": 128,
    "min_accept_length": 0.8,  # of the baseline's accept length (a speculative spec)
    "min_tokens_per_s": 0.7,  # of the baseline's output tokens/s
    "timeout_s": 120,  # a request not done by then counts as failed, and fails the canary
}

# The chat completion that must return text before a rollout counts as done.
smoke = {
    "prompt": "Say hello in one short sentence.",
    "max_tokens": 16,
    "timeout_s": 120,
}

# The SGLang a class runs (docs/engines.md; every key in docs/spec.md). Not declared here, so
# each class runs its own hand-made environment at service.launcher. Declared (in a class file, or
# here for all), the deploy installs it into a venv of its own beside the live one and checks it there
# before anything stops; the class then drops service.launcher (the two are exclusive). E.g.:
#   engine = {"sglang": "sglang==0.5.23", "index_url": "https://pypi.org/simple", "keep": 2}

# Where models declared by repository come from (docs/engines.md, "Weights by revision"). A class names its
# target as service.model = {"repo": ..., "revision": <commit>} (and its draft as
# speculative.draft_model) instead of a path; the deploy fetches that revision on each host into
# hub.models_dir/ORG/NAME/REVISION before anything stops. The defaults: the public hub, no token,
# 4 hosts fetching at once, 10 GiB left free. An internal mirror and a token, e.g.:
#   hub = {"endpoint": "http://hf-mirror.internal:8090", "token": {"env": "HF_TOKEN"}, "max_parallel": 2}
