"""The LM head only where the loss is: SFT whose logits are computed for the labelled positions alone.

Both SFT trainers (`clap train sft`, `clap train agent-sft`) put the loss on a small share of the tokens — the
answer after a prompt of retrieved chunks, the agent's turns between tool returns. TRL 1.16's fused LM head
scores only those positions on Triton devices (CUDA, XPU); elsewhere it projects every position onto the
49k-token vocabulary, in tiles, and discards the unlabelled ones. On a CPU that is most of the head's work
and much of the step's memory. `LabelledHeadSFTTrainer` hands the model the positions whose next token has
a label (`logits_to_keep` as a boolean mask, transformers' own way of slicing the hidden states before the
head) and takes the same loss TRL takes: the summed negative log-likelihood of those tokens over the batch's
label count (`num_items_in_batch` under gradient accumulation), with TRL's entropy, token accuracy and token
count logged beside it. Measured by `benchmarks/bench_train.py` (`clap` against `clap_tiled`, TRL's head).
On Triton devices, and for every option this does not cover, TRL's own `compute_loss` runs.

Under a memory budget (`memory_budget`, a `clap.train.memory.MicroBatchPlan`) each batch the dataloader gives is
forwarded and backpropagated in micro-batches sized to the budget (`clap.train.memory.micro_batches`), each cut to
its own longest row, with the whole step's label count as the loss's denominator: the gradient is the batch's, the
sampler and the optimizer's trajectory are unchanged, and the activations alive at once are one micro-batch's.
"""

from __future__ import annotations

from trl import SFTTrainer

from clap.train.memory import micro_batches, recompute


def next_token_targets(labels):
    """(positions, targets): a boolean mask of the positions whose *next* token carries a label, and those
    labels in the mask's row-major order — what the logits at those positions must predict."""
    import torch

    following = labels[:, 1:]
    labelled = following != -100
    keep = torch.zeros_like(labels, dtype=torch.bool)
    keep[:, :-1] = labelled
    return keep, following[labelled]


def labelled_loss(logits, targets, num_items_in_batch=None):
    """(loss, entropy, is_top1) of logits [N, vocab] against targets [N]: the summed NLL over
    `num_items_in_batch` (or N), computed in fp32 whatever precision the head ran in."""
    import torch

    log_probs = torch.log_softmax(logits.float(), dim=-1)
    nll = -log_probs.gather(-1, targets[:, None]).squeeze(-1)
    loss = nll.sum() / torch.as_tensor(targets.numel() if num_items_in_batch is None else num_items_in_batch).clamp(min=1)
    with torch.no_grad():
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        is_top1 = log_probs.argmax(-1) == targets
    return loss, entropy, is_top1


def row_slice(inputs: dict, rows: list[int], multiple: int | None = None) -> dict:
    """The tensors of `inputs` for `rows` (in that order), cut after the last column any of them attends to,
    rounded up to a `multiple` of columns (the batch's `pad_to_multiple_of`, so micro-batches keep the few widths
    the batches have): right padding beyond a micro-batch's longest row is dropped, positions before it are
    untouched."""
    import torch

    index = torch.as_tensor(rows)
    batch = inputs["input_ids"].shape[0]
    picked = {k: (v.index_select(0, index.to(v.device)) if torch.is_tensor(v) and v.dim() >= 1 and v.shape[0] == batch
                  else v) for k, v in inputs.items()}
    mask = picked.get("attention_mask")
    if mask is None or mask.dim() != 2:
        return picked
    width = int(mask.any(0).nonzero().max()) + 1 if mask.any() else mask.shape[1]
    if multiple:
        width = min(mask.shape[1], -(-width // multiple) * multiple)
    return {k: (v[:, :width] if torch.is_tensor(v) and v.dim() == 2 and v.shape[1] == mask.shape[1] else v)
            for k, v in picked.items()}


class LabelledHeadSFTTrainer(SFTTrainer):
    """TRL's `SFTTrainer` whose training loss computes logits at the labelled positions only, and whose step runs
    in micro-batches when a memory budget is set (above)."""

    memory_budget = None  # a clap.train.memory.MicroBatchPlan, or None: the whole batch at once
    _decoder_layers = None  # the layers whose recomputation a micro-batch switches (`_recompute_layers`)

    def training_step(self, model, inputs, num_items_in_batch=None):
        plan = self.memory_budget
        mask = inputs.get("attention_mask")
        if plan is None or num_items_in_batch is None or mask is None or mask.dim() != 2 or "labels" not in inputs \
                or self.args.padding_free:
            return super().training_step(model, inputs, num_items_in_batch)

        lengths = [int(n) for n in mask.sum(1)]
        labelled = [int(n) for n in (inputs["labels"][:, 1:] != -100).sum(1)]
        total = None
        for rows in micro_batches(lengths, labelled, plan):
            if not plan.checkpointing:
                if self._decoder_layers is None:  # found once: the model's modules do not change while it trains
                    self._decoder_layers = _decoder_layers(model)
                _recompute_layers(self._decoder_layers, recompute(rows, lengths, labelled, plan))
            part = inputs if len(rows) == len(lengths) else row_slice(inputs, rows, self.args.pad_to_multiple_of)
            loss = super().training_step(model, part, num_items_in_batch)
            total = loss if total is None else total + loss
        return total


def _decoder_layers(model) -> list:
    """transformers' decoder layers (`GradientCheckpointingLayer`) of `model`, in order."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def _recompute_layers(layers: list, count: int) -> None:
    """Gradient checkpointing for the first `count` decoder layers of the next forward pass, none for the rest: a
    layer recomputes its activations in the backward pass while its `gradient_checkpointing` flag is set.
    Non-reentrant checkpointing needs no input that requires grad, so it works under a frozen, PEFT-wrapped base."""
    import functools

    import torch.utils.checkpoint

    for k, layer in enumerate(layers):
        if k < count and getattr(layer, "_gradient_checkpointing_func", None) is None:
            layer._gradient_checkpointing_func = functools.partial(torch.utils.checkpoint.checkpoint,
                                                                   use_reentrant=False)
        layer.gradient_checkpointing = k < count
