"""H200 (141 GB HBM3e) boxes: the 27B model with EAGLE3 tree speculation.

"NVIDIA H200 NVL" is a different part (PCIe, other clocks): not accepted here.
"""

gpu_class = {
    "accepted_models": ["NVIDIA H200"],
    "gpu_count": 1,
    "min_memory_mib": 140000,  # reports 143771 MiB
}

service = {
    "unit": "sglang",
    "launcher": "/opt/sglang/bin/python",
    "model_path": "/root/models/Qwen3.6-27B",
    "served_model_name": "qwen3.6-27b",
    "host": "127.0.0.1",
    "port": 30000,
    "tp_size": 1,
    "mem_fraction": 0.88,
    "context_length": 65536,
}

speculative = {
    "algorithm": "EAGLE3",
    "draft_model_path": "/root/models/Qwen3.6-27B-EAGLE3",
    "num_steps": 3,
    "topk": 4,
    "num_draft_tokens": 8,
}
