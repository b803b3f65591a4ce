"""RTX A6000 boxes (2 x 48 GB): a smaller model, linear DFlash too."""

gpu_class = {
    "accepted_models": ["NVIDIA RTX A6000"],
    "gpu_count": 2,
    "min_memory_mib": 48000,  # reports 49140 MiB
}

service = {
    "unit": "sglang",
    "launcher": "/opt/sglang/bin/python",
    "model_path": "/root/models/Qwen3-8B",
    "served_model_name": "qwen3-8b",
    "host": "0.0.0.0",
    "port": 30000,
    "tp_size": 2,
    "mem_fraction": 0.8,
    "context_length": 16384,
}

speculative = {
    "algorithm": "DFLASH",
    "draft_model_path": "/root/models/Qwen3-8B-DFlash",
    "block_size": 16,
}
