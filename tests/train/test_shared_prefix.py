"""RLOO's log-probabilities with each prompt run once equal TRL's own full-row forwards: the same per-token
log-probabilities and entropies, the same LoRA gradients — on left-padded prompts of different lengths, each
shared by several right-padded completions, for a Llama and a Gemma 3 (sliding-window) model."""

import pytest
import torch

from clap.config import Lora
from clap.train.shared_prefix import SharedPrefixRLOOTrainer, shared_prompts


def test_shared_prompts_groups_rows_by_prompt_tokens_and_padding():
    ids = torch.tensor([[0, 5, 6, 1, 2], [0, 5, 6, 3, 0], [7, 5, 6, 1, 1], [0, 5, 6, 9, 9], [0, 5, 6, 1, 2]])
    mask = torch.tensor([[0, 1, 1, 1, 1], [0, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]])
    first, row_prompt = shared_prompts(ids, mask, logits_to_keep=2)
    assert first.tolist() == [0, 2, 3]  # row 3 has row 0's tokens but no padding: another prompt
    assert row_prompt.tolist() == [0, 0, 1, 2, 0]
    assert shared_prompts(ids, mask, logits_to_keep=4)[0].tolist() == [0, 2, 3]  # 1 prompt token: 0 vs 7, mask


def _trainer(model_dir, tmp_path):
    from datasets import Dataset
    from trl import RLOOConfig

    from clap.model import load_model, load_tokenizer
    from clap.train.common import lora_config

    torch.manual_seed(0)
    model = load_model(model_dir)
    lora = lora_config(Lora(lora_r=4, lora_alpha=8, lora_dropout=0.0, target_modules="auto"), model)
    args = RLOOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], max_steps=1, num_generations=3,
                      per_device_train_batch_size=6, beta=0.04, bf16=False)
    trainer = SharedPrefixRLOOTrainer(model=model, args=args, train_dataset=Dataset.from_list([{"prompt": "a"}] * 6),
                                      processing_class=load_tokenizer(model_dir), peft_config=lora,
                                      reward_funcs=[lambda completions, **_: [1.0] * len(completions)])
    for name, p in trainer.model.named_parameters():  # LoRA B starts at 0: give it weight so its gradient is not trivial
        if "lora_B" in name:
            p.data.normal_(0, 0.02)
    return trainer


def _batch(pad, prompt_lengths=(70, 12), completions=((4, 9, 2), (7, 1, 5))):
    """Left-padded prompts (the first longer than the tiny Gemma's 64-token window), each with 3 right-padded
    completions of different lengths."""
    g = torch.Generator().manual_seed(1)
    width, keep = max(prompt_lengths), max(map(max, completions))
    ids, mask = [], []
    for length, lens in zip(prompt_lengths, completions):
        prompt = torch.randint(10, 400, (length,), generator=g).tolist()
        for n in lens:
            done = torch.randint(10, 400, (n,), generator=g).tolist()
            ids.append([pad] * (width - length) + prompt + done + [pad] * (keep - n))
            mask.append([0] * (width - length) + [1] * (length + n) + [0] * (keep - n))
    return torch.tensor(ids), torch.tensor(mask), keep


def _logps_and_grads(trainer, method, ids, mask, keep):
    trainer.model.zero_grad()
    logps, entropy, _ = method(trainer, trainer.model, ids, mask, keep, compute_entropy=True)
    ((logps * mask[:, -keep:]).sum() + entropy.sum() * 0.1).backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    return logps.detach(), entropy.detach(), grads


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_logps_entropies_and_lora_gradients_equal_trls_own(tiny_dir, tmp_path, arch):
    from trl import RLOOTrainer

    from clap.model import tiny_model_dir

    model_dir = tiny_dir if arch == "llama" else tiny_model_dir(tmp_path / "gemma", tiny_dir, arch="gemma3")
    trainer = _trainer(model_dir, tmp_path / "out")
    trainer.model.train()
    ids, mask, keep = _batch(trainer.processing_class.pad_token_id)
    ours = _logps_and_grads(trainer, SharedPrefixRLOOTrainer._get_per_token_logps_and_entropies, ids, mask, keep)
    theirs = _logps_and_grads(trainer, RLOOTrainer._get_per_token_logps_and_entropies, ids, mask, keep)
    assert ours[0].shape == theirs[0].shape == (6, keep)
    assert torch.allclose(ours[0], theirs[0], atol=1e-5)
    assert torch.allclose(ours[1], theirs[1], atol=1e-5)
    assert (ours[0][mask[:, -keep:] == 0] == 0).all()  # padding after a completion is not scored
    assert ours[2].keys() == theirs[2].keys() and len(ours[2]) > 0
    for name, grad in ours[2].items():
        assert torch.allclose(grad, theirs[2][name], atol=1e-6, rtol=1e-4), name
    assert any(g.abs().sum() > 0 for g in ours[2].values())


def test_distinct_prompts_take_trls_own_path(tiny_dir, tmp_path, monkeypatch):
    from trl import RLOOTrainer

    trainer = _trainer(tiny_dir, tmp_path)
    ids, mask, keep = _batch(trainer.processing_class.pad_token_id, completions=((4,), (7,)))
    called = []
    original = RLOOTrainer._get_per_token_logps_and_entropies
    monkeypatch.setattr(RLOOTrainer, "_get_per_token_logps_and_entropies",
                        lambda self, *a, **k: called.append(1) or original(self, *a, **k))
    with torch.no_grad():
        trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep)
    assert called == [1]


def test_the_update_under_gradient_checkpointing_takes_trls_own_path(tiny_dir, tmp_path, monkeypatch):
    """A checkpointed block keeps no cache: the update's forward runs the full rows; the forwards without
    gradients (the policy before the update, the reference) still run each prompt once."""
    from trl import RLOOTrainer

    trainer = _trainer(tiny_dir, tmp_path)
    trainer.model.gradient_checkpointing_enable()
    trainer.model.train()
    ids, mask, keep = _batch(trainer.processing_class.pad_token_id)
    called = []
    original = RLOOTrainer._get_per_token_logps_and_entropies
    monkeypatch.setattr(RLOOTrainer, "_get_per_token_logps_and_entropies",
                        lambda self, *a, **k: called.append(torch.is_grad_enabled()) or original(self, *a, **k))
    with torch.no_grad():
        trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep)
    assert called == []
    logps = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep)[0]
    assert called == [True] and logps.requires_grad
