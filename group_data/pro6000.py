"""RTX PRO 6000 Blackwell boxes: Qwen3.6-27B with the z-lab DFlash drafter.

This replaced the old NEXTN (built-in MTP) configuration; the training job that
shares these GPUs is stopped first.
"""

gpu_class = {
    "accepted_models": [
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    ],
    "gpu_count": 1,
    "min_memory_mib": 95000,  # 96 GB parts report 97887 MiB
}

service = {
    "unit": "sglang",
    "launcher": "/opt/sglang/bin/python",
    "model_path": "/root/models/Qwen3.6-27B",
    "served_model_name": "qwen3.6-27b",
    "host": "0.0.0.0",
    "port": 30000,
    "tp_size": 1,
    "mem_fraction": 0.85,
    "context_length": 32768,
}

speculative = {
    "algorithm": "DFLASH",
    "draft_model_path": "/root/models/Qwen3.6-27B-DFlash",
    "block_size": 16,
}

workloads = ["dflash-train.service"]
