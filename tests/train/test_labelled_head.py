"""The SFT loss with logits at the labelled positions only equals TRL's own (which scores every position on CPU):
same loss, same LoRA gradients, same logged token accuracy — on right-padded rows whose labels start at different
places, alone and as one micro-batch of a gradient-accumulation step (`num_items_in_batch`)."""

import pytest
import torch

from clap.config import Lora
from clap.train.labelled_head import LabelledHeadSFTTrainer, labelled_loss, next_token_targets


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
