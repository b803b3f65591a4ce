"""The lab's real SGLang server (lab file key real_sglang; lab/realsglang.py): SGLang 0.5.23 on a CPU,
serving a tiny random Qwen3, for the lab tests that prove the deploy against the real program
(tests/lab/test_real_sglang_e2e.py). No host of a real fleet is in this group.

Everything a CPU needs is said here, through the spec's own fields, as any class says what its
hosts need (../shared/reference/sglang-cpu.md has the measured recipe): no speculation (the real
server cannot speculate on a CPU without AMX), the CPU device and torch-native attention, no CUDA
graphs, and a capped KV cache (uncapped, SGLang sizes it from 0.719 of the host's RAM: 15 GB).
"""

gpu_class = {
    # the lab host keeps its nvidia-smi double: preflight asks it as on any GPU box
    "accepted_models": ["NVIDIA L4"],
    "gpu_count": 1,
    "min_memory_mib": 20000,
}

service = {
    "unit": "sglang",
    "launcher": "/opt/sglang-real/sglang-0.5.23-serve/bin/python",  # lab/realsglang.py LAUNCHER
    "model_path": "/root/models/tiny-qwen3",
    "served_model_name": "tiny-qwen3",
    "host": "0.0.0.0",
    "port": 30000,
    "context_length": 4096,
    "extra_args": ["--device", "cpu", "--attention-backend", "torch_native", "--disable-cuda-graph",
                   "--max-total-tokens", "16384", "--max-running-requests", "16"],
    # without SGLANG_USE_CPU_ENGINE SGLang does not take itself to be on a CPU; the model is local
    "environment": {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1"},
    # each start is 20-80 s of imports on a busy 2-core machine: a crash is rolled back, not retried
    "restarts_on_crash": 0,
}

# all.py's readiness (a start-up of 20-80 s and more on a loaded 2-core machine fits its load timeout), but each
# command reading the host may take minutes: preflight's engine check imports SGLang, up to a minute there
readiness = {
    "load_timeout_s": 1200,
    "poll_interval_s": 0.5,
    "progress_every_s": 15,
    "workload_release_timeout_s": 120,
    "command_timeout_s": 300,
}
