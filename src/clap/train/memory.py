"""The accelerator memory a LoRA or QLoRA training run needs, estimated from the model's architecture.

    python benchmarks/estimate_memory.py            # every profile in conf/model/, and the check on a tiny model

What a run holds, in four parts (`estimate`):

- **weights**: the frozen base — 4-bit NF4 with double quantisation for the decoder layers' projections under
  QLoRA (bitsandbytes: 0.5 byte a weight plus about 0.127 bit of quantisation constants), the embeddings, norms and
  an untied LM head in the compute dtype; everything in the compute dtype without QLoRA;
- **adapter**: the LoRA matrices in fp32 with their gradients and AdamW's two moments (16 bytes a parameter);
- **activations**: what autograd keeps for the backward pass, per decoder layer and token — the inputs the LoRA
  matrices need (after dropout), the rotary and attention tensors (keys and values repeated to every query head,
  the output and its log-sum-exp), the MLP's gate, activation and up projections, the norms' fp32 inputs — plus
  the logits (in the compute dtype and upcast to fp32 for the loss);
- **overhead**: the CUDA context and the allocator's slack, a fixed allowance.

The parts are pure arithmetic; `measure_tiny` measures the same parts on a tiny model on the CPU (the tensors'
bytes, and what autograd saves during a forward pass), which the estimate is checked against
(tests/train/test_memory.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 1024 ** 3
NF4_BYTES = 0.5 + 0.127 / 8       # 4 bits a weight, plus double-quantised absmax constants (QLoRA paper, §2)
ADAM_LORA_BYTES = 4 + 4 + 8       # fp32 weight, its gradient, AdamW's first and second moments
OVERHEAD_BYTES = int(1.0 * GIB)   # CUDA context, cuBLAS workspace and allocator fragmentation (an allowance)


@dataclass(frozen=True)
class Shape:
    """A decoder-only transformer's shape, as its config.json gives it."""
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    tied: bool

    @classmethod
    def from_config(cls, config) -> Shape:
        c = config.get_text_config() if hasattr(config, "get_text_config") else config
        get = (lambda k, d=None: c.get(k, d)) if isinstance(c, dict) else (lambda k, d=None: getattr(c, k, d))
        heads = get("num_attention_heads")
        return cls(vocab=get("vocab_size"), hidden=get("hidden_size"), layers=get("num_hidden_layers"), heads=heads,
                   kv_heads=get("num_key_value_heads") or heads,
                   head_dim=get("head_dim") or get("hidden_size") // heads,
                   intermediate=get("intermediate_size"), tied=bool(get("tie_word_embeddings", False)))

    def projections(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear projection of one decoder layer (Llama, Qwen2, Gemma, Mistral)."""
        q, kv, h, i = self.heads * self.head_dim, self.kv_heads * self.head_dim, self.hidden, self.intermediate
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    def layer_projection_params(self) -> int:
        return sum(a * b for a, b in self.projections().values())

    def other_params(self) -> int:
        """Embeddings, an untied LM head, and the norms (two a layer and a final one)."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + (2 * self.layers + 1) * self.hidden

    def parameters(self) -> int:
        return self.layers * self.layer_projection_params() + self.other_params()


# The profiles' models (conf/model/), from their config.json on the Hub.
PUBLISHED = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": Shape(49152, 576, 30, 9, 3, 64, 1536, True),
    "google/gemma-3-270m": Shape(262144, 640, 18, 4, 1, 256, 2048, True),
    "Qwen/Qwen2.5-0.5B-Instruct": Shape(151936, 896, 24, 14, 2, 64, 4864, True),
    "Qwen/Qwen2.5-3B-Instruct": Shape(151936, 2048, 36, 16, 2, 128, 11008, True),
    "meta-llama/Llama-3.1-8B-Instruct": Shape(128256, 4096, 32, 32, 8, 128, 14336, False),
}


def lora_params(shape: Shape, r: int, targets: list[str] | None = None) -> int:
    """LoRA parameters: r × (in + out) for each targeted projection of each layer (all projections by default)."""
    chosen = shape.projections() if targets is None else {k: v for k, v in shape.projections().items() if k in targets}
    return shape.layers * sum(r * (a + b) for a, b in chosen.values())


def activation_bytes_per_token(shape: Shape, dtype_bytes: int) -> dict[str, float]:
    """What autograd keeps for one token: in one decoder layer, and in the logits (pure)."""
    h, i = shape.hidden, shape.intermediate
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    attention = 3 * h + q + kv + 3 * q + q + q    # LoRA inputs of q,k,v; rotary q,k; SDPA q,k,v (repeated); out; o's LoRA input
    mlp = 2 * h + 3 * i + i                        # LoRA inputs of gate, up; gate, activation, up; down's LoRA input
    norms = 2 * h * 4 / dtype_bytes                # RMSNorm upcasts its input to fp32
    return {"layer": (attention + mlp + norms) * dtype_bytes, "logits": shape.vocab * (dtype_bytes + 4 + 4)}


def estimate(shape: Shape, *, lora_r: int, batch: int, seq_len: int, qlora: bool, bf16: bool,
             checkpointing: bool = False, targets: list[str] | None = None,
             overhead: int = OVERHEAD_BYTES) -> dict[str, float]:
    """Bytes each part of a training step holds at its peak, and their total (pure). With gradient checkpointing
    (which QLoRA's `prepare_model_for_kbit_training` turns on) a layer keeps only its input until the backward pass
    recomputes it: every layer's input, one layer's activations, and the logits."""
    dtype_bytes = 2 if (bf16 or qlora) else 4
    projections = shape.layers * shape.layer_projection_params()
    weights = projections * (NF4_BYTES if qlora else dtype_bytes) + shape.other_params() * dtype_bytes
    adapter = lora_params(shape, lora_r, targets) * ADAM_LORA_BYTES
    per_token = activation_bytes_per_token(shape, dtype_bytes)
    tokens = batch * seq_len
    kept = shape.layers * shape.hidden * dtype_bytes + per_token["layer"] if (checkpointing or qlora) \
        else shape.layers * per_token["layer"]
    activations = tokens * (kept + per_token["logits"])
    parts = {"weights": weights, "adapter": adapter, "activations": activations, "overhead": overhead}
    return parts | {"total": sum(parts.values())}


def measure_tiny(shape: Shape, *, lora_r: int, batch: int, seq_len: int, seed: int = 0) -> dict[str, float]:
    """The same parts measured on a randomly initialised Llama of `shape` on the CPU in fp32 (no overhead):
    the base's and the adapter's tensors after one AdamW step, and the bytes autograd saves in one forward pass
    (each storage counted once)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=shape.vocab, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
                         num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim,
                         intermediate_size=shape.intermediate, tie_word_embeddings=shape.tied,
                         max_position_embeddings=max(seq_len, 64), attn_implementation="sdpa")
    model = LlamaForCausalLM(config)
    base = sum(p.numel() * p.element_size() for p in model.parameters())
    model = get_peft_model(model, LoraConfig(r=lora_r, lora_alpha=2 * lora_r, lora_dropout=0.05,
                                             target_modules=list(shape.projections()), task_type="CAUSAL_LM"))
    model.train()
    ids = torch.randint(0, shape.vocab, (batch, seq_len))
    saved: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4)
    optimizer.step()
    weights = {id(p) for p in model.parameters()}
    adapter = sum(p.numel() * p.element_size() * 2 for p in trainable)  # the weight and its gradient
    adapter += sum(t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values()
                   if torch.is_tensor(t) and t.dim() > 0)
    parameter_storages = {p.untyped_storage().data_ptr() for p in model.parameters() if id(p) in weights}
    activations = sum(n for ptr, n in saved.items() if ptr not in parameter_storages)
    return {"weights": base, "adapter": adapter, "activations": activations}


@dataclass(frozen=True)
class MicroBatchPlan:
    """How a trainer under `memory_budget_mb` splits each batch: the bytes its activations may take, what one
    token (through every decoder layer) and one labelled token (its row of the LM head's logits, upcast for the
    loss) cost of them, and whether every micro-batch is recomputed in the backward pass (`checkpointing`: asked
    for, or QLoRA) or only a row too long to fit without it, by as many layers as it must."""
    budget_mb: int
    available: float
    per_token: float
    per_labelled: float
    checkpointing: bool
    layers: int = 1
    saved_per_layer: float = 0.0      # bytes a token no longer holds for each decoder layer that is recomputed

    def cost(self, group: list[int], lengths: list[int], labelled: list[int]) -> float:
        """Bytes of the activations of the micro-batch of rows `group`, padded to its longest row (pure)."""
        return (len(group) * max(lengths[j] for j in group) * self.per_token
                + sum(labelled[j] for j in group) * self.per_labelled)

    def longest_without_recompute(self) -> int:
        """Tokens of the longest row that fits the budget with every activation kept."""
        return int(self.available // self.per_token) if self.per_token else 0

    def line(self, trainer: str, max_length: int) -> str:
        rows = max(1, int(self.available // max(1.0, self.per_token * max_length)))
        fits = self.longest_without_recompute()
        return (f"clap: {trainer}: memory budget {self.budget_mb} MB: {self.available / 2**20:.0f} MB for activations, "
                f"{self.per_token / 1024:.0f} KB a token → micro-batches of about {rows} row(s) of {max_length} tokens"
                + ("; gradient checkpointing on" if self.checkpointing else
                   f"; a row over {fits} tokens has just enough of its layers recomputed in the backward pass to fit"
                   if fits < max_length else ""))


def micro_batch_plan(shape: Shape, budget_mb: int, *, lora_r: int, weights_bytes: int, qlora: bool,
                     max_length: int, checkpointing: bool, targets: list[str] | None = None) -> MicroBatchPlan:
    """The plan for a `budget_mb` peak (pure). `weights_bytes` is the dtype the weights and saved activations are
    held in (4 on a CPU, where bf16 autocast keeps fp32 weights and the residual stream in fp32; 2 in bf16 on
    CUDA). `checkpointing` (or QLoRA, which turns it on) recomputes every micro-batch; otherwise only a row that
    does not fit is. The budget that cannot hold the weights, the adapter and the overhead is refused with the
    figure they need."""
    fixed = estimate(shape, lora_r=lora_r, batch=0, seq_len=0, qlora=qlora, bf16=weights_bytes == 2, targets=targets)
    available = budget_mb * 2**20 - (fixed["weights"] + fixed["adapter"] + fixed["overhead"])
    if available <= 0:
        raise ValueError(f"memory_budget_mb {budget_mb} is below what the weights, the adapter and the overhead "
                         f"alone take: {(fixed['total']) / 2**20:.0f} MB")
    per_layer = activation_bytes_per_token(shape, weights_bytes)
    kept = shape.layers * per_layer["layer"]
    recomputed = shape.layers * shape.hidden * weights_bytes + per_layer["layer"]
    always = checkpointing or qlora
    return MicroBatchPlan(budget_mb=budget_mb, available=available, per_token=recomputed if always else kept,
                          per_labelled=per_layer["logits"], checkpointing=always, layers=shape.layers, saved_per_layer=per_layer["layer"] - shape.hidden * weights_bytes)


def micro_batches(lengths: list[int], labelled: list[int], plan: MicroBatchPlan) -> list[list[int]]:
    """The rows of one batch in groups whose activations fit `plan.available` (pure): a group costs its rows ×
    its longest row's tokens (the padded micro-batch) through the layers, plus its labelled tokens through the LM
    head. Rows are taken longest first, so each group pads little; a row that alone exceeds the budget is a group
    of its own (`recompute` says whether its layers must be recomputed). The gradient of the batch is the sum over
    its groups, so only the memory changes."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    for i in order:
        if groups:
            g = groups[-1] + [i]
            if plan.cost(g, lengths, labelled) <= plan.available:
                groups[-1] = g
                continue
        groups.append([i])
    return groups


def recompute(group: list[int], lengths: list[int], labelled: list[int], plan: MicroBatchPlan) -> int:
    """How many decoder layers of a micro-batch recompute their activations in the backward pass (pure): every
    one under `checkpointing`; else none when its kept activations fit the budget, and otherwise just enough,
    counted from the first, for them to fit (a row that does not fit alone, by `micro_batches`) — each recomputed
    layer keeps only its input, and costs one more forward pass of that layer."""
    if plan.checkpointing:
        return plan.layers
    tokens = len(group) * max(lengths[j] for j in group)
    over = plan.cost(group, lengths, labelled) - plan.available
    if over <= 0:
        return 0
    if plan.saved_per_layer <= 0:
        return plan.layers
    return min(plan.layers, math.ceil(over / (tokens * plan.saved_per_layer)))
