"""Each prompt once: RLOO whose log-probabilities run a state's prompt once for all the actions sampled in it.

    clap train agent-rloo       (the trainer behind it: `SharedPrefixRLOOTrainer`)

RLOO samples `num_generations` actions in each state and scores every one three times a step: the policy's log-
probabilities before the update (for the clipped ratio and the KL penalty), the frozen reference's (the KL
penalty) and the policy's again with gradients (the loss). TRL 1.16 runs each of those forwards over every row in
full — prompt and completion — so a state's prompt (the conversation so far, hundreds of tokens) goes through the
model `num_generations` times per forward for an action of a few dozen. On a CPU, where TRL's fused LM head also
projects every prompt position onto the vocabulary, that is most of the step.

`prefix_logps` runs the distinct prompts once (one batch, their key/value cache kept), copies each prompt's cache to
the rows that share it, and runs only the completions on top of it, through the same fused head with the same
labels. A prompt's positions are the same in both ways (left padding is part of the prompt, so rows that share a
prompt share its padding), so the log-probabilities and the LoRA gradients are TRL's own up to float rounding:
autograd sums each shared prompt's gradient over the rows that read its cache. One difference stays when the
adapter has dropout and the model is in training mode: the rows of one state share the prompt's dropout mask.
Measured by `benchmarks/bench_rloo_step.py` (seconds per step beside TRL's own `RLOOTrainer`). Multimodal
inputs, MoE auxiliary losses and batches whose prompts are all distinct take TRL's own path, and so does the
update's forward under gradient checkpointing (`agent.rloo.gradient_checkpointing`): a checkpointed block runs
again in the backward pass, and transformers keeps no cache under it.
"""

from __future__ import annotations

from trl import RLOOTrainer


def shared_prompts(input_ids, attention_mask, logits_to_keep: int):
    """(first, row_prompt): for the prompt part of each row (everything before the last `logits_to_keep`
    tokens, padding included), the index of the first row holding each distinct prompt, and for every row the
    position of its prompt in `first`. Rows with the same tokens but different padding are different prompts."""
    import torch

    prompt_len = input_ids.size(1) - logits_to_keep
    keys = torch.cat([input_ids[:, :prompt_len], attention_mask[:, :prompt_len]], dim=1)
    first, row_prompt, seen = [], [], {}
    for row, key in enumerate(keys.tolist()):
        k = tuple(key)
        if k not in seen:
            seen[k] = len(first)
            first.append(row)
        row_prompt.append(seen[k])
    return (torch.tensor(first, dtype=torch.long, device=input_ids.device),
            torch.tensor(row_prompt, dtype=torch.long, device=input_ids.device))


def prefix_logps(model, input_ids, attention_mask, logits_to_keep: int, groups=None):
    """(log_probs, outputs) of the last `logits_to_keep` tokens of each row, as TRL's `fused_lm_head` forward
    computes them over the full rows: the prompts but their last token run once per distinct prompt with a key/
    value cache; the last prompt token and the completion run per row on the cache copied to it. `model` is the
    policy as TRL holds it (a PEFT model whose causal LM carries TRL's fused head); `groups`: `shared_prompts`'s
    answer when the caller has it."""
    prompt_len = input_ids.size(1) - logits_to_keep
    first, row_prompt = groups or shared_prompts(input_ids, attention_mask, logits_to_keep)
    head = model(input_ids=input_ids[first, :prompt_len - 1], attention_mask=attention_mask[first, :prompt_len - 1],
                 use_cache=True, logits_to_keep=1)
    cache = head.cache
    cache.batch_select_indices(row_prompt)  # each row's prompt cache; a differentiable gather
    tail_ids = input_ids[:, prompt_len - 1:]
    labels = tail_ids.masked_fill(attention_mask[:, prompt_len - 1:] == 0, -100)
    labels[:, 0] = -100  # the last prompt token is read, not scored
    outputs = model(input_ids=tail_ids, attention_mask=attention_mask, cache=cache, labels=labels,
                    fused_lm_head=True)
    return outputs.log_probs[:, -logits_to_keep:], outputs


def checkpointed(model) -> bool:
    """Whether gradient checkpointing is on in any of `model`'s blocks: a checkpointed block runs its forward
    again in the backward pass and would write its keys and values to a cache twice, so transformers switches
    the cache off under it."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


class SharedPrefixRLOOTrainer(RLOOTrainer):
    """TRL's `RLOOTrainer` whose three log-probability forwards run each distinct prompt once (above)."""

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **multimodal):
        import torch

        prompt_len = input_ids.size(1) - logits_to_keep
        groups = shared_prompts(input_ids, attention_mask, logits_to_keep) if prompt_len >= 2 else None
        distinct = len(groups[0]) if groups else 0
        recomputed = torch.is_grad_enabled() and model.training and checkpointed(model)
        if (compute_aux_loss or recomputed or any(v is not None for v in multimodal.values())
                or not 0 < distinct < input_ids.size(0)):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **multimodal)
        with self.accelerator.autocast():
            logps, outputs = prefix_logps(model, input_ids, attention_mask, logits_to_keep, groups)
        return logps, (outputs.entropy[:, -logits_to_keep:] if compute_entropy else None), None
