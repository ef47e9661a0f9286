"""Prefix caching for multi-turn decoding: the KV of what a model already read is kept and reused when a
later prompt starts with the same tokens.

An agent episode's turn t+1 is its turn-t prompt, the agent's action and the tool's answer: without a cache
every turn re-reads the whole conversation (prefill dominated the rollouts, `benchmarks/bench_agent.py`).
`Engine(reuse_prefixes=N)` keeps up to N tokens of KV, least recently used first out, per model (an adapter
switched on or off changes every key and value), and each new prompt prefills only what follows its longest
cached prefix — vLLM's automatic prefix caching, on the engine's own grammar loop. Only greedy decoding under
a grammar uses it (`decode_under_grammar`); reused keys and values are those the same model computed for the
same tokens at the same positions, so answers equal a fresh prefill up to floating-point rounding (measured
by `bench_agent`).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from clap import lazy

torch = lazy.module("torch")
kv_cache = lazy.module("clap.evaluate.kv_cache")  # extends transformers' DynamicCache

KV = list[tuple["torch.Tensor", "torch.Tensor"]]  # per layer (keys, values), [heads, tokens, head_dim]


class PrefixCache:
    """`cache.longest(model, ids)` → (tokens reused, their KV); `cache.put(model, ids, kv)`."""

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens
        self.entries: OrderedDict[tuple[str, bytes], tuple[np.ndarray, KV]] = OrderedDict()
        self.tokens = 0
        self.reused_tokens = 0  # prompt tokens not prefilled again, over the engine's life
        self.prefilled_tokens = 0

    def longest(self, model: str, ids: list[int]) -> tuple[int, KV | None]:
        """The longest cached prefix of `ids` for `model`, one token short of the whole prompt at most (the
        last one must go through the model to give the next token's logits). Counts what is reused and what
        is left to prefill."""
        want = np.asarray(ids, dtype=np.int64)
        best, best_key = 0, None
        for key, (seq, _) in self.entries.items():
            if key[0] != model:
                continue
            n = min(len(seq), len(want) - 1)
            if n <= best:
                continue
            same = seq[:n] == want[:n]
            common = n if same.all() else int(same.argmin())
            if common > best:
                best, best_key = common, key
        self.reused_tokens += best
        self.prefilled_tokens += len(want) - best
        if best_key is None:
            return 0, None
        self.entries.move_to_end(best_key)
        return best, [(k[:, :best], v[:, :best]) for k, v in self.entries[best_key][1]]

    def put(self, model: str, ids: list[int], kv: KV) -> None:
        """Keep the KV of `ids` (as many tokens as `kv` holds), dropping the least recently used beyond the budget."""
        seq = np.asarray(ids, dtype=np.int64)
        if len(seq) != kv[0][0].shape[1]:
            raise ValueError(f"{len(seq)} tokens for a KV of {kv[0][0].shape[1]}")
        if len(seq) > self.max_tokens:
            return
        key = (model, seq.tobytes())
        if key in self.entries:
            self.tokens -= len(self.entries.pop(key)[0])
        self.entries[key] = (seq, kv)
        self.tokens += len(seq)
        while self.tokens > self.max_tokens:
            self.tokens -= len(self.entries.popitem(last=False)[1][0])


def seeded_batch(prompts: list[list[int]], reused: list[tuple[int, KV | None]], pad_id: int, reserve: int):
    """The inputs of one batch whose rows reuse cached prefixes: (ids, mask, cache). Each row's cached KV is
    left-padded to the longest reused prefix, then its remaining prompt tokens, left-padded inside the chunk;
    the mask zeroes both paddings, so every token keeps its own position (`decode_under_grammar`). The cache
    keeps room for `reserve` tokens after the prefix (the prompts' rest and the answer: `GrowingCache`)."""
    width = max(n for n, _ in reused)
    tails = [p[n:] for p, (n, _) in zip(prompts, reused)]
    chunk = max(len(t) for t in tails)
    ids = torch.tensor([[pad_id] * (chunk - len(t)) + t for t in tails])
    mask = torch.tensor([[0] * (width - n) + [1] * n + [0] * (chunk - len(t)) + [1] * len(t)
                         for (n, _), t in zip(reused, tails)])
    if width == 0:
        return ids, mask, None
    template = next(kv for n, kv in reused if kv is not None)
    cache = kv_cache.GrowingCache(len(template), reserve=chunk + reserve)
    for layer, (k0, v0) in enumerate(template):
        keys, values = [], []
        for n, kv in reused:
            k, v = kv[layer] if kv is not None else (k0[:, :0], v0[:, :0])
            pad = (0, 0, width - n, 0)  # left, along the token axis of [heads, tokens, head_dim]
            keys.append(torch.nn.functional.pad(k, pad))
            values.append(torch.nn.functional.pad(v, pad))
        cache.update(torch.stack(keys), torch.stack(values), layer)
    return ids, mask, cache
