"""Bytes autograd saves in one forward pass of SmolLM2 with LoRA at 500, 1000 and 2000 tokens, beside
`clap.train.memory.estimate`'s layers term:  cd <project with models/base> && python saved.py"""
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model

from clap.model import load_model
from clap.train.memory import Shape, estimate

model = load_model(Path("models/base"))
print("attention", model.config._attn_implementation)
model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear",
                                         task_type="CAUSAL_LM"))
model.train()
shape = Shape.from_config(model.config)
parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
for length in (500, 1000, 2000):
    saved: dict[int, int] = {}

    def pack(t, saved=saved):
        storage = t.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return t

    ids = torch.randint(0, 40000, (1, length))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids),
                    logits_to_keep=torch.zeros(1, length, dtype=torch.bool))
    activations = sum(n for ptr, n in saved.items() if ptr not in parameters)
    layers = estimate(shape, lora_r=16, batch=1, seq_len=length, qlora=False, bf16=False)["activations"] \
        - length * shape.vocab * 12
    print(length, "saved MB", activations // 2**20, "estimate (layers) MB", int(layers) // 2**20, flush=True)
    del out
