import torch

from clap.domain import prompts
from clap.evaluate.generate import Engine
from clap.evaluate.merged_lora import MergedAdapters

CHUNK = {"chunk_id": "c1-p1", "doc_id": "c1", "page": 1, "text": "Revenue was 1,200.5 RMB 10k. Margin was 7%."}
CONVS = [prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt(q, [CHUNK])) for q in ("Revenue?", "Margin?", "Both?")]


def _two_adapters(tiny_dir):
    """The tiny model with two random LoRA adapters (B not zero: each changes the logits), one on attention only."""
    from peft import LoraConfig, get_peft_model

    from clap.model import load_model

    model = get_peft_model(load_model(tiny_dir), LoraConfig(r=4, target_modules=["q_proj", "v_proj", "down_proj"],
                                                            init_lora_weights=False), adapter_name="one")
    model.add_adapter("two", LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    return model.eval()


def test_a_merged_adapter_gives_the_unmerged_logits_and_leaves_the_base_and_other_adapters_as_they_were(tiny_dir):
    model = _two_adapters(tiny_dir)
    ids = torch.tensor([[1, 17, 42, 99, 5, 300]])
    own = {n: p.detach().clone() for n, p in model.named_parameters()}

    def logits(adapter=None):
        with torch.inference_mode():
            if adapter is None:
                with model.disable_adapter():
                    return model(input_ids=ids).logits
            model.set_adapter(adapter)
            return model(input_ids=ids).logits

    base, one, two = logits(), logits("one"), logits("two")
    assert not torch.allclose(base, one, atol=1e-3) and not torch.allclose(one, two, atol=1e-3)
    merged = MergedAdapters(model)
    for name, unmerged in (("one", one), ("two", two), ("one", one)):  # switching back and forth
        with torch.inference_mode(), merged.active(name):
            assert torch.allclose(model(input_ids=ids).logits, unmerged, atol=1e-4)
    assert all(torch.equal(p, own[n]) for n, p in model.named_parameters())  # the base's weights, bit for bit
    assert torch.equal(logits(), base) and torch.equal(logits("two"), two)


def test_an_error_inside_the_block_still_puts_the_base_weights_back(tiny_dir):
    model = _two_adapters(tiny_dir)
    layer = MergedAdapters(model).layers[0]
    own = layer.base_layer.weight
    merged = MergedAdapters(model)
    try:
        with merged.active("one"):
            assert layer.base_layer.weight is not own
            raise RuntimeError("a request failed")
    except RuntimeError:
        pass
    assert layer.base_layer.weight is own and not any(m.disable_adapters for m in merged.layers)


def test_the_engine_answers_alike_merged_or_not_and_keeps_their_answers_apart(tiny_dir, sft_start, tmp_path):
    """fp32: merged and unmerged adapters give the same greedy answers; the answer store keys them apart
    (in bf16 their rounding differs), and the base model's answers are shared."""
    adapter, manifest = sft_start
    store = tmp_path / "answers"
    plain = Engine(tiny_dir, adapter, manifest, answer_store=store)
    merged = Engine(tiny_dir, adapter, manifest, answer_store=store, merge_adapters=True)
    assert merged.decoding_id(True) != plain.decoding_id(True) and merged.decoding_id(False) == plain.decoding_id(False)

    def answers(engine, use_adapter):
        return [(g.text, g.reused) for g in engine.generate(CONVS, use_adapter=use_adapter, max_new_tokens=24,
                                                            batch_size=2, progress=False)]

    want = answers(plain, True)
    got = answers(merged, True)
    assert [t for t, _ in got] == [t for t, _ in want] and not any(r for _, r in got)
    base = answers(plain, False)
    assert answers(merged, False) == [(t, True) for t, _ in base]  # the base model's answers are shared
