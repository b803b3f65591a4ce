"""Make the lab's tiny model, offline: a byte-level BPE tokenizer of 1024 tokens trained on local text, with a
chat template, and a randomly initialised Qwen3 (2 layers, hidden 128, 4 heads, 2 KV heads, head_dim 32, tied
embeddings: about half a million parameters), saved with transformers. It serves nothing meaningful: it lets
the real SGLang server load, answer and count on a CPU in seconds.

    SERVE_PYTHON tools/sglang-serve/tiny_model.py OUT_DIR TEXT_FILE...

Deterministic for the same text and packages (a fixed seed): lab/realsglang.py caches it by its recipe.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB = 1024
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CONTEXT = 4096


def tokenizer(texts: list[str], out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, model_max_length=CONTEXT)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def model(fast, out: Path) -> None:
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(fast), hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=CONTEXT,
                         tie_word_embeddings=True, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
                         bos_token_id=None, torch_dtype="bfloat16")
    net = Qwen3ForCausalLM(config).to(torch.bfloat16)
    net.save_pretrained(out, safe_serialization=True)
    # greedy: the same prompt gives the same reply (the smoke test's text does not depend on luck)
    GenerationConfig(do_sample=False, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id).save_pretrained(out)


def main(argv: list[str]) -> int:
    out, sources = Path(argv[0]), [Path(p) for p in argv[1:]]
    texts = [line for p in sources for line in p.read_text(errors="replace").splitlines() if line.strip()]
    out.mkdir(parents=True, exist_ok=True)
    fast = tokenizer(texts, out)
    model(fast, out)
    print(json.dumps({"vocab": len(fast), "dir": str(out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
