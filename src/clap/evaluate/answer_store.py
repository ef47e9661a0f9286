"""Answers reused by content address: a greedy answer is a function of the model's bytes, the prompt's
tokens, the grammar and the decoding code, so the same request is never decoded twice.

    dvc exp run -S generate.reuse_answers=false   # decode everything again (the store is left as it is)

Round after round the base model answers the same holdouts and replay questions, and prod answers what it
answered as the last round's candidate: `generate.Engine` looks every greedy request up here first and
decodes only the rest (evaluate, replay, the decision evaluation). The key hashes everything the answer
depends on — the base weights, the active adapter's pinned file hashes, the prompt's token ids (chat
template included), the JSON schema, `max_new_tokens`, the precision and decoding options (adapters merged,
jump-forward), the decoding code (`generate.py`, `decoding.py`,
`metrics.py`) and the torch / transformers / peft / xgrammar versions — so a change to any of them is a
miss, never a stale answer. A sampled answer is stored only when its draw is the request's own (a per-request
seed: `Engine.generate(seed=)`, the agent's pass^k runs and mined draws), with the temperature, top-k, top-p
and seed in the key; draws from torch's global RNG are not. A reused answer keeps the
latency measured when it was decoded; records say which answers were reused. The decision evaluation's
ranking scores (a completion's summed log-probability under a model) are kept the same way, keyed by the
model, the prompt-and-completion tokens and the precision (adapters merged or not).

The store lives outside DVC's outputs (`paths.ANSWER_STORE` in the workspace, one small JSON file per answer, each
written atomically), like a compiler cache: deleting it costs time, never results. The experiments of a
`dvc exp run --queue` sweep share their workspace's store (`clap.evaluate.engines.answer_store`).
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from importlib import metadata
from pathlib import Path

from clap import paths
from clap.io import atomic_write_text

_CODE = ("generate.py", "decoding.py", "metrics.py", "kv_cache.py", "merged_lora.py", "prefix_cache.py")  # prompt → stored text
_LIBRARIES = ("torch", "transformers", "peft", "xgrammar")


@cache
def _code_salt() -> str:
    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in _CODE:
        h.update((here / name).read_bytes())
    for lib in _LIBRARIES:
        try:
            h.update(f"{lib}=={metadata.version(lib)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{lib} absent".encode())
    return h.hexdigest()


_ADAPTER_FILES = (paths.ADAPTER_CONFIG, paths.ADAPTER_WEIGHTS)  # what PEFT loads: all that decides an answer


def model_id(base_weights_sha256: dict, adapter_files: dict | None = None) -> str:
    """Content identity of what answers: the base weights' hashes, plus the hashes of the adapter files PEFT
    loads. A pin may list more (a release bundle pins the model card too, the candidate's manifest does not):
    they change no answer, so prod reuses what it answered as the last round's candidate."""
    loaded = {k: v for k, v in (adapter_files or {}).items() if k in _ADAPTER_FILES}
    parts = [json.dumps(base_weights_sha256, sort_keys=True), json.dumps(loaded, sort_keys=True)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def same_adapter(pins: dict[str, dict], a: str, b: str) -> bool:
    """Whether the adapters named `a` and `b` (`pins`: name → pinned file hashes) load the same files: the
    candidate that a release put in prod, re-gated, is prod's own adapter (evaluate's `candidate_is_prod`)."""
    return a in pins and b in pins and model_id({}, pins[a]) == model_id({}, pins[b])


class AnswerStore:
    """`store.get(key)` / `store.put(key, answer)` with `key = store.key(model, prompt_ids, schema, max_new_tokens, decoding)`;
    `store.get_logprob(key)` with `key = store.logprob_key(model, token_ids, completion_from, decoding)`."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.hits = 0  # greedy answers
        self.misses = 0
        self.scores_reused = 0  # completion log-probabilities
        self.scores_missed = 0

    def key(self, model: str, prompt_ids: list[int], schema: dict | None, max_new_tokens: int,
            decoding: str = "float32") -> str:
        """`decoding`: how the engine decodes beyond the request (`Engine.decoding_id`: the dtype, adapters merged,
        jump-forward) — bf16 and fp32, merged or not, may pick different tokens where the model is unsure, so an
        answer is reused only under the decoding that produced it."""
        h = hashlib.sha256()
        for part in (_code_salt(), model, json.dumps(prompt_ids), json.dumps(schema, ensure_ascii=False),
                     str(max_new_tokens), decoding):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def logprob_key(self, model: str, token_ids: list[int], completion_from: int, decoding: str = "float32") -> str:
        """The key of a completion's summed log-probability: `token_ids` are prompt and completion, scored from
        position `completion_from` on (`Engine.completion_logprobs`)."""
        h = hashlib.sha256()
        for part in ("logprob", _code_salt(), model, json.dumps(token_ids), str(completion_from), decoding):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def _read(self, key: str, field: str, kind: type | tuple[type, ...]) -> dict | None:
        """The stored record when its `field` has the expected type, else None; an unreadable file counts as absent."""
        try:
            record = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        ok = isinstance(record, dict) and isinstance(record.get(field), kind) and not isinstance(record[field], bool)
        return record if ok else None

    def get(self, key: str) -> dict | None:
        """The stored answer (text, new_tokens, latency_ms), or None."""
        answer = self._read(key, "text", str)
        self.hits += answer is not None
        self.misses += answer is None
        return answer

    def get_logprob(self, key: str) -> float | None:
        """The stored log-probability, or None."""
        record = self._read(key, "logprob", (int, float))
        self.scores_reused += record is not None
        self.scores_missed += record is None
        return None if record is None else float(record["logprob"])

    def put(self, key: str, answer: dict) -> None:
        atomic_write_text(self._path(key), json.dumps(answer, ensure_ascii=False))
