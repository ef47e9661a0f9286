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
"""

from __future__ import annotations

from trl import SFTTrainer


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


class LabelledHeadSFTTrainer(SFTTrainer):
    """TRL's `SFTTrainer` whose training loss computes logits at the labelled positions only (above)."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.get("labels")
        if (return_outputs or labels is None or labels.device.type in ("cuda", "xpu") or self.compute_loss_func
                is not None or self.label_smoother is not None or self.args.loss_type != "nll" or self.aux_loss_enabled):
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        import torch

        mode = "train" if self.model.training else "eval"
        keep, targets = next_token_targets(labels)
        model_inputs = {k: v for k, v in inputs.items() if k != "labels"} | {"use_cache": False, "logits_to_keep": keep}
        logits = model(**model_inputs).logits  # [labelled tokens, vocab]
        loss, entropy, is_top1 = labelled_loss(logits, targets, num_items_in_batch)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * (self.accelerator.num_processes // self.get_tp_size())  # DDP averages; as TRL does

        gather = self.accelerator.gather_for_metrics
        valid = gather(torch.as_tensor(targets.numel(), device=labels.device)).sum()
        self._metrics[mode]["entropy"].append((gather(entropy.sum()).sum() / valid).item() if valid > 0 else 0.0)
        self._metrics[mode]["mean_token_accuracy"].append(
            (gather(is_top1.sum()).sum() / valid).item() if valid > 0 else 0.0)
        if mode == "train":
            counted = inputs["attention_mask"].sum() if "attention_mask" in inputs else \
                torch.as_tensor(inputs["input_ids"].numel(), device=labels.device)
            self._total_train_tokens += gather(counted).sum().item() // self._tp_size
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
        return loss
