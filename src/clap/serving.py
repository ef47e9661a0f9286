"""Serving check: an adapter is loaded only when its files match the hashes it was released (or
trained) with and its base model is the one it was trained on. Anything but safetensors weights in
the adapter folder — a pickle posing as an adapter — is refused before a byte of it is loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

from clap.io import sha256_file

ALLOWED = {"adapter_config.json", "adapter_model.safetensors", "README.md", "manifest.json"}


class AdapterRefused(RuntimeError):
    """The adapter (or its base) does not match its evidence; the message names the file."""


def adapter_manifest(adapter_dir: Path, base_identity: dict) -> dict:
    adapter_dir = Path(adapter_dir)
    return {"files": {n: sha256_file(adapter_dir / n) for n in ("adapter_config.json", "adapter_model.safetensors")},
            "base_model": {"name": base_identity["name"], "weights_sha256": base_identity["weights_sha256"]}}


def verify_adapter(adapter_dir: Path, expected: dict, base_identity: dict) -> None:
    """Raise AdapterRefused unless the adapter folder matches `expected` (an adapter manifest)."""
    adapter_dir = Path(adapter_dir)
    if not adapter_dir.is_dir():
        raise AdapterRefused(f"{adapter_dir}: no adapter folder")
    for p in sorted(adapter_dir.iterdir()):
        if p.name not in ALLOWED:
            raise AdapterRefused(f"{p}: unexpected file in adapter folder (only safetensors weights are loaded)")
    weights = adapter_dir / "adapter_model.safetensors"
    if weights.exists() and weights.read_bytes()[:2] in (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"PK"):
        raise AdapterRefused(f"{weights}: a pickle/zip archive, not safetensors; refused without loading")
    for name, digest in expected["files"].items():
        path = adapter_dir / name
        if not path.exists():
            raise AdapterRefused(f"{path}: missing")
        if sha256_file(path) != digest:
            raise AdapterRefused(f"{path}: sha256 does not match the evidence")
    want = expected["base_model"]["weights_sha256"]
    if want != base_identity["weights_sha256"]:
        raise AdapterRefused(f"{base_identity['path']}: base model weights differ from the ones the adapter was "
                             f"trained on ({expected['base_model']['name']})")


def load_adapter(model, adapter_dir: Path, expected: dict | None, base_identity: dict):
    """Verify, then attach the adapter (inference only). `expected` defaults to the adapter's manifest.json."""
    from peft import PeftModel

    adapter_dir = Path(adapter_dir)
    if expected is None:
        mf = adapter_dir / "manifest.json"
        if not mf.exists():
            raise AdapterRefused(f"{mf}: no manifest; refusing an adapter without evidence")
        expected = json.loads(mf.read_text())
    verify_adapter(adapter_dir, expected, base_identity)
    return PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=False, use_safetensors=True)
