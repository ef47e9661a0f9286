"""Adapters folded into the base weights for inference, one copy per adapter, the base left untouched.

PEFT computes an attached LoRA adapter beside each of its 210 target layers (SmolLM2-135M, all seven
projections): two more small matmuls, a scaling and the adds, per layer and per decoding step. On 2 CPU
cores that extra work made the adapter decode 1.4× slower than the base model on the same replay requests
(bf16, batch 10; `benchmarks/bench_grammar_loop.py`). `MergedAdapters` computes W + ΔW once per adapter (in
float32, then cast to the model's dtype) and, while that adapter answers, swaps those weights into the base
layers with PEFT's adapters switched off — as serving stacks do with `merge_and_unload`, without losing the
base model: its own weight tensors are put back untouched when the block ends, so the base model and every
other adapter answer exactly as before.

The sum is the same function; in bf16 its rounding differs from computing the two paths apart, so an unsure
answer can change (19 of 20 replay answers identical, bf16; `conf/config.yaml`, `generate.merge_adapters`).
"""

from __future__ import annotations

import contextlib

from clap import lazy

torch = lazy.module("torch")


class MergedAdapters:
    """`with merged.active(name): model(...)` runs the model with adapter `name` folded into its weights."""

    def __init__(self, model):
        from peft.tuners.lora import LoraLayer

        self.model = model
        self.layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
        self.weights: dict[str, list[torch.nn.Parameter]] = {}

    @lazy.no_grad
    def _merged(self, name: str) -> list[torch.nn.Parameter]:
        if name not in self.weights:
            out = []
            for layer in self.layers:
                base = layer.base_layer.weight
                if name not in layer.lora_A:  # this adapter does not target the layer
                    out.append(base)
                    continue
                delta = layer.get_delta_weight(name).float()
                out.append(torch.nn.Parameter((base.float() + delta).to(base.dtype), requires_grad=False))
            self.weights[name] = out
        return self.weights[name]

    @contextlib.contextmanager
    def active(self, name: str):
        merged = self._merged(name)
        own = [layer.base_layer.weight for layer in self.layers]
        try:
            for layer, weight in zip(self.layers, merged):
                layer.base_layer.weight = weight
            with self.model.disable_adapter():
                yield
        finally:
            for layer, weight in zip(self.layers, own):
                layer.base_layer.weight = weight
