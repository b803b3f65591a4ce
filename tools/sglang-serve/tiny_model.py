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
    net = Qwen3ForCausalLM(config)
    with torch.no_grad():
        # Tied embeddings: a token's logit is the hidden state against its row. Rows of unit scale make the logits
        # sharp (sampling at temperature 1 keeps to the few likeliest tokens), and the zero rows of the special
        # tokens and of the tokens that are only whitespace are then never among them: a reply is never empty or
        # blank (a smoke test's "no text"), and it ends at max_tokens, not at an end of text that came by chance.
        rows = net.model.embed_tokens.weight
        rows.normal_(0.0, 1.0)
        blank = [i for i in range(len(fast)) if i in fast.all_special_ids or not fast.decode([i]).strip()]
        rows[blank] = 0.0
    net = net.to(torch.bfloat16)
    net.save_pretrained(out, safe_serialization=True)
    GenerationConfig(eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id).save_pretrained(out)


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
