import os
import sys
from pathlib import Path

import pytest

# tests call `dvc`, `clap` and `accelerate` as commands: use this interpreter's environment
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the repositories tests create with `dvc init` send no usage report (each left a file in /tmp) and check no update
os.environ.setdefault("DVC_NO_ANALYTICS", "1")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def params():
    """The repository's conf/ composed and typed (`clap.config.Params`): what every stage's command passes on.
    Session-wide: a test that changes a value changes a `copy.deepcopy` of it."""
    from clap.config import compose, typed

    return typed(compose(conf=ROOT / "conf"))


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory):
    """The real SmolLM2 as safetensors: the project's cache when present, else converted once."""
    from clap.model import resolve_base

    cached = ROOT / "models" / "base"
    if (cached / "manifest.json").exists():
        return cached
    return resolve_base("smollm2", tmp_path_factory.mktemp("smollm2") / "base")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, smollm2_dir):
    """A tiny random Llama with the SmolLM2 tokenizer."""
    from clap.model import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("tiny"), smollm2_dir)


@pytest.fixture(scope="session")
def small_loop(tmp_path_factory, params):
    """Demo corpus → assets → materialized batches b1, b2 → admission records, at a small scale."""
    from clap.demo import corpus as demo_data
    from clap.stages import admit, assetize, materialize

    root = tmp_path_factory.mktemp("loop")
    demo_data.write(root / "raw", seed=5, scale=0.3)
    assetize.run(params.assetize, root / "raw", root / "assets")
    for b in ("b1", "b2"):
        materialize.run(params.materialize, root / "assets", b, root / "materialized" / b, rewards=params.rewards, retrieval_k=params.retrieval.k)
        admit.run(params.admit, root / "materialized" / b, root / "admission" / f"{b}.json")
    return root


@pytest.fixture(scope="session")
def sft_start(tmp_path_factory, params, small_loop, tiny_dir):
    """A tiny SFT adapter (3 steps) and its manifest: the starting point of the DPO and GRPO steps."""
    import copy
    import json

    from clap.stages import train_sft

    cfg = copy.deepcopy(params)
    cfg.train.sft = cfg.train.sft.model_copy(update=dict(max_steps=3, logging_steps=1, save_steps=3, per_device_batch_size=2, gradient_accumulation=1))
    root = tmp_path_factory.mktemp("sft")
    train_sft.run(cfg.train, small_loop / "materialized", small_loop / "admission", ["b1"], tiny_dir, root / "sft", root / "ckpt")
    adapter = root / "sft" / "adapter"
    return adapter, json.loads((adapter / "manifest.json").read_text())
