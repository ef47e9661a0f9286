"""The SFT loss with logits at the labelled positions only equals TRL's own (which scores every position on CPU):
same loss, same LoRA gradients, same logged token accuracy — on right-padded rows whose labels start at different
places, alone and as one micro-batch of a gradient-accumulation step (`num_items_in_batch`)."""

import pytest
import torch

from clap.config import Lora
from clap.train.labelled_head import LabelledHeadSFTTrainer, labelled_loss, next_token_targets, row_slice


def test_next_token_targets_are_the_labels_one_position_on():
    labels = torch.tensor([[-100, -100, 7, 8, -100], [-100, 5, -100, 6, 9]])
    keep, targets = next_token_targets(labels)
    assert keep.tolist() == [[False, True, True, False, False], [True, False, True, True, False]]
    assert targets.tolist() == [7, 8, 5, 6, 9]  # row-major, as logits_to_keep flattens the kept positions


def test_labelled_loss_of_a_hand_computed_case():
    logits = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    loss, entropy, top1 = labelled_loss(logits, torch.tensor([0, 1]))
    nll = torch.log(torch.tensor(2.0)) + (2 + torch.log1p(torch.exp(torch.tensor(-2.0))))
    assert loss.item() == pytest.approx(nll.item() / 2, abs=1e-6)
    assert labelled_loss(logits, torch.tensor([0, 1]), num_items_in_batch=4)[0].item() == pytest.approx(nll.item() / 4)
    assert top1.tolist() == [True, False] and entropy[0].item() == pytest.approx(torch.log(torch.tensor(2.0)).item())


def _trainer(tiny_dir, tmp_path):
    from datasets import Dataset
    from trl import SFTConfig

    from clap.model import load_model, load_tokenizer
    from clap.train.common import lora_config

    torch.manual_seed(0)
    args = SFTConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], max_steps=1, per_device_train_batch_size=2)
    rows = Dataset.from_list([{"input_ids": [1, 2, 3, 4, 5, 6], "labels": [-100, -100, -100, 4, 5, 6]}])
    model = load_model(tiny_dir)
    lora = lora_config(Lora(lora_r=4, lora_alpha=8, lora_dropout=0.0, target_modules="auto"), model)
    trainer = LabelledHeadSFTTrainer(model=model, args=args, train_dataset=rows,
                                     processing_class=load_tokenizer(tiny_dir), peft_config=lora)
    for name, p in trainer.model.named_parameters():  # LoRA B starts at 0: give it weight so its gradient is not trivial
        if "lora_B" in name:
            p.data.normal_(0, 0.02)
    return trainer


def _loss_and_grads(trainer, which, batch, num_items):
    trainer.model.zero_grad()
    loss = which(trainer, trainer.model, dict(batch), num_items_in_batch=num_items)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    return loss.item(), grads, trainer._metrics["train"]["mean_token_accuracy"][-1]


@pytest.mark.parametrize("num_items", [None, torch.tensor(11)])
def test_loss_and_lora_gradients_equal_trls_own(tiny_dir, tmp_path, num_items):
    from trl import SFTTrainer

    trainer = _trainer(tiny_dir, tmp_path)
    trainer.model.train()
    pad = trainer.processing_class.pad_token_id
    batch = {"input_ids": torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12], [13, 14, 15, 16, 17, pad, pad, pad]]),
             "attention_mask": torch.tensor([[1] * 8, [1] * 5 + [0] * 3]),
             "labels": torch.tensor([[-100, -100, -100, -100, -100, 10, 11, 12], [-100, -100, 15, 16, 17, -100, -100, -100]])}
    ours = _loss_and_grads(trainer, LabelledHeadSFTTrainer.compute_loss, batch, num_items)
    theirs = _loss_and_grads(trainer, SFTTrainer.compute_loss, batch, num_items)
    assert ours[0] == pytest.approx(theirs[0], rel=1e-5)
    assert ours[2] == pytest.approx(theirs[2])
    assert ours[1].keys() == theirs[1].keys() and len(ours[1]) > 0
    for name, grad in ours[1].items():
        assert torch.allclose(grad, theirs[1][name], atol=1e-6, rtol=1e-4), name
    assert any(g.abs().sum() > 0 for g in ours[1].values())


def _step_loss_and_grads(trainer, batch, num_items):
    trainer.model.zero_grad()
    loss = trainer.training_step(trainer.model, dict(batch), num_items_in_batch=num_items)
    return loss.item(), {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("available, recomputed", [(8.0, [0, 0, 0]), (4.0, [2, 1, 0])])
def test_a_step_in_micro_batches_has_the_whole_batchs_loss_and_gradient(tiny_dir, tmp_path, available, recomputed):
    """Under a memory budget that holds one row at a time, a training step of three right-padded rows runs as
    three micro-batches (each cut to its own length) and gives the batch's loss and LoRA gradients — also when a
    row too long for the budget has its layers recomputed in the backward pass (gradient checkpointing for it)."""
    from clap.train.memory import MicroBatchPlan

    trainer = _trainer(tiny_dir, tmp_path)
    trainer.current_gradient_accumulation_steps = 1
    pad = trainer.processing_class.pad_token_id
    batch = {"input_ids": torch.tensor([[5, 6, 7, pad, pad, pad, pad, pad], [5, 6, 7, 8, 9, 10, 11, 12],
                                        [13, 14, 15, 16, 17, pad, pad, pad]]),
             "attention_mask": torch.tensor([[1] * 3 + [0] * 5, [1] * 8, [1] * 5 + [0] * 3]),
             "labels": torch.tensor([[-100, 6, 7, -100, -100, -100, -100, -100],
                                     [-100, -100, -100, -100, -100, 10, 11, 12],
                                     [-100, -100, 15, 16, 17, -100, -100, -100]])}
    num_items = torch.tensor(7)
    whole = _step_loss_and_grads(trainer, batch, num_items)
    seen = []
    original = LabelledHeadSFTTrainer.compute_loss

    def spy(self, model, inputs, **kw):
        seen.append(tuple(inputs["input_ids"].shape))
        from transformers.modeling_layers import GradientCheckpointingLayer

        flags.append(sum(m.gradient_checkpointing is True for m in model.modules()
                         if isinstance(m, GradientCheckpointingLayer)))
        return original(self, model, inputs, **kw)

    flags = []
    trainer.memory_budget = MicroBatchPlan(budget_mb=1024, available=available, per_token=1.0, per_labelled=0.0,
                                           checkpointing=False, layers=2,
                                           saved_per_layer=0.4)
    LabelledHeadSFTTrainer.compute_loss = spy
    try:
        split = _step_loss_and_grads(trainer, batch, num_items)
    finally:
        LabelledHeadSFTTrainer.compute_loss = original
    assert seen == [(1, 8), (1, 5), (1, 3)]  # longest first, each cut to its own length
    assert flags == recomputed
    assert split[0] == pytest.approx(whole[0], rel=1e-5)
    for name, grad in whole[1].items():
        assert torch.allclose(split[1][name], grad, atol=1e-6, rtol=1e-4), name
    assert any(g.abs().sum() > 0 for g in split[1].values())


def test_training_under_a_budget_follows_the_same_trajectory(tiny_dir, tmp_path):
    """Two optimizer steps with and without micro-batches log the same losses and end at the same LoRA weights;
    the base is untouched. Plain SGD: AdamW's first step turns float noise in a gradient that is exactly zero in
    exact arithmetic (LoRA A's, while B is still zero) into a full ±lr update, which would hide what is compared; fp32, as bf16 rounds
    differently at each micro-batch's shape (the real-model curves under bf16: benchmarks/bench_train.py, clap_whole beside clap)."""
    from datasets import Dataset
    from trl import SFTConfig

    from clap.model import load_model, load_tokenizer
    from clap.train.common import lora_config
    from clap.train.memory import MicroBatchPlan

    rows = Dataset.from_list([{"input_ids": list(range(3, 3 + n)), "labels": [-100] * (n - 2) + [n, n + 1]}
                              for n in (4, 9, 6, 12, 5, 7, 10, 8)])
    finals, losses = [], []
    for plan in (None, MicroBatchPlan(budget_mb=1024, available=13.0, per_token=1.0, per_labelled=0.0,
                                      checkpointing=False)):
        torch.manual_seed(0)
        args = SFTConfig(output_dir=str(tmp_path / str(plan is None)), use_cpu=True, report_to=[], max_steps=2,
                         per_device_train_batch_size=4, gradient_accumulation_steps=1, learning_rate=1e-2,
                         save_strategy="no", seed=0, logging_steps=1, optim="sgd", bf16=False)
        model = load_model(tiny_dir)
        base = {n: p.detach().clone() for n, p in model.named_parameters()}
        lora = lora_config(Lora(lora_r=4, lora_alpha=8, lora_dropout=0.0, target_modules="auto"), model)
        trainer = LabelledHeadSFTTrainer(model=model, args=args, train_dataset=rows,
                                         processing_class=load_tokenizer(tiny_dir), peft_config=lora)
        trainer.memory_budget = plan
        trainer.train()
        weights = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}
        for n, p in trainer.model.named_parameters():
            if "lora_" not in n:
                assert torch.equal(p, base[n.replace("base_model.model.", "").replace("base_layer.", "")]), n
        finals.append(weights)
        losses.append([h["loss"] for h in trainer.state.log_history if "loss" in h])
    assert len(losses[0]) == 2 and losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert finals[0].keys() == finals[1].keys()
    assert any(not torch.equal(w, torch.zeros_like(w)) for n, w in finals[0].items() if "lora_B" in n)  # LoRA moved
    for name, w in finals[0].items():
        assert torch.allclose(finals[1][name], w, atol=1e-6, rtol=1e-4), name


@pytest.mark.parametrize("multiple, width", [(None, 5), (1, 5), (4, 8), (5, 5), (8, 8), (16, 10)])
def test_a_micro_batch_keeps_the_batchs_multiple_of_columns(multiple, width):
    """Cut after the longest attended column, rounded up to `pad_to_multiple_of`, never past the batch's width."""
    inputs = {"input_ids": torch.arange(30).view(3, 10), "attention_mask": torch.tensor([[1] * 5 + [0] * 5,
                                                                                         [1] * 10, [1] * 3 + [0] * 7]),
              "labels": torch.arange(30).view(3, 10)}
    out = row_slice(inputs, [2, 0], multiple)
    assert out["input_ids"].shape == (2, width) and out["labels"].shape == (2, width)
    assert out["input_ids"][:, 0].tolist() == [20, 0]  # the rows asked for, in that order


def test_padding_to_a_multiple_changes_the_shapes_not_the_trajectory(tiny_dir, tmp_path):
    """`train.sft.pad_to_multiple_of`: two optimizer steps with batches padded to a multiple of 8 columns (and in
    micro-batches that keep it) log the losses and reach the LoRA weights of the unpadded run (fp32, plain SGD, as
    above); the padded run's batches are all 8 or 16 wide."""
    from datasets import Dataset
    from trl import SFTConfig

    from clap.model import load_model, load_tokenizer
    from clap.train.common import lora_config
    from clap.train.memory import MicroBatchPlan

    rows = Dataset.from_list([{"input_ids": list(range(3, 3 + n)), "labels": [-100] * (n - 2) + [n, n + 1]}
                              for n in (4, 9, 6, 12, 5, 7, 10, 8)])
    finals, losses, widths = [], [], []
    original = LabelledHeadSFTTrainer.compute_loss

    def spy(self, model, inputs, **kw):
        widths.append(inputs["input_ids"].shape[1])
        return original(self, model, inputs, **kw)

    for multiple in (None, 8):
        torch.manual_seed(0)
        args = SFTConfig(output_dir=str(tmp_path / str(multiple)), use_cpu=True, report_to=[], max_steps=2,
                         per_device_train_batch_size=4, gradient_accumulation_steps=1, learning_rate=1e-2,
                         save_strategy="no", seed=0, logging_steps=1, optim="sgd", bf16=False,
                         pad_to_multiple_of=multiple)
        model = load_model(tiny_dir)
        lora = lora_config(Lora(lora_r=4, lora_alpha=8, lora_dropout=0.0, target_modules="auto"), model)
        trainer = LabelledHeadSFTTrainer(model=model, args=args, train_dataset=rows,
                                         processing_class=load_tokenizer(tiny_dir), peft_config=lora)
        trainer.memory_budget = MicroBatchPlan(budget_mb=1024, available=13.0, per_token=1.0, per_labelled=0.0,
                                               checkpointing=False)
        widths.clear()
        LabelledHeadSFTTrainer.compute_loss = spy
        try:
            trainer.train()
        finally:
            LabelledHeadSFTTrainer.compute_loss = original
        finals.append({n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n})
        losses.append([h["loss"] for h in trainer.state.log_history if "loss" in h])
    assert set(widths) <= {8, 16} and len(widths) > 2  # the padded run, in several micro-batches
    assert len(losses[0]) == 2 and losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert any(not torch.equal(w, torch.zeros_like(w)) for n, w in finals[0].items() if "lora_B" in n)
    for name, w in finals[0].items():
        assert torch.allclose(finals[1][name], w, atol=1e-6, rtol=1e-4), name
