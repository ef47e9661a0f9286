"""Composed configuration: `conf/` → params.yaml, and strict loading of params.yaml.

    clap params            # rewrite params.yaml from conf/ (a test checks they agree)

Unknown keys anywhere in params.yaml are an error: a typo must not silently fall back to a default.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import OmegaConf

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def compose(overrides: list[str] | None = None, conf_dir: Path = CONF_DIR) -> dict:
    """Compose conf/config.yaml with Hydra, exactly as DVC's Hydra integration does."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(conf_dir.resolve()), version_base=None):
        cfg = hydra_compose(config_name="config", overrides=overrides or [])
    return OmegaConf.to_container(cfg, resolve=True)


def dump(params: dict) -> str:
    return yaml.safe_dump(params, sort_keys=False, allow_unicode=True)


def load(path: Path = Path("params.yaml"), reference: dict | None = None) -> dict:
    """Load params.yaml and reject keys that conf/ does not define."""
    params = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    _strict(params, reference if reference is not None else compose(), "")
    return params


def _strict(got: dict, ref: dict, where: str) -> None:
    unknown = sorted(set(got) - set(ref))
    if unknown:
        raise ValueError(f"params.yaml: unknown key(s) {', '.join(where + k for k in unknown)}")
    for k, v in got.items():
        if isinstance(v, dict) and isinstance(ref.get(k), dict) and k not in ("weights",):
            _strict(v, ref[k], f"{where}{k}.")
