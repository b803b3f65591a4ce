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
