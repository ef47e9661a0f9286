"""A KV cache for step-by-step decoding that writes each step in place instead of copying the whole cache.

transformers' `DynamicCache` appends a step's keys and values with `torch.cat`: every decoding step copies
every layer's whole cache (prompt included) into a new tensor. On the 2-core demo machine that copy was
≈ 17 % of a replay batch's decoding step (10 rows, ≈ 800 prompt tokens, profiled). `GrowingCache` keeps each
layer in a buffer with room for `reserve` more tokens, writes a step into it and hands attention a view of
the filled part; the buffer grows (by `reserve` again) only when full. Attention reads the same values, so
answers do not change (tested against `DynamicCache`); `benchmarks/bench_grammar_loop.py` measures it.

Everything else of `DynamicCache` stays: `batch_select_indices` when rows leave, `layer.keys` / `layer.values`
for whoever keeps a row's KV (`PrefixCache`).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose `keys` / `values` are views of buffers with spare room on the token axis."""

    def __init__(self, reserve: int):
        super().__init__()
        self.reserve = reserve
        self._k = self._v = None
        self._filled = 0

    @property
    def keys(self):
        return self._k if self._k is None or self._k.dim() < 4 else self._k[..., :self._filled, :]

    @keys.setter
    def keys(self, tensor):  # DynamicLayer's own methods (init, crop, reset) assign whole tensors
        self._k = tensor
        self._filled = tensor.shape[-2] if tensor is not None and tensor.dim() == 4 else 0

    @property
    def values(self):
        return self._v if self._v is None or self._v.dim() < 4 else self._v[..., :self._filled, :]

    @values.setter
    def values(self, tensor):
        self._v = tensor

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        new = key_states.shape[-2]
        n = self._filled
        if self._k.dim() < 4 or self._k.shape[-2] < n + new or self._k.shape[0] != key_states.shape[0]:
            self._k, self._v = self._grown(self.keys, key_states), self._grown(self.values, value_states)
        else:
            self._k[..., n:n + new, :] = key_states
            self._v[..., n:n + new, :] = value_states
        self._filled = n + new
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows `indices` (rows that left the batch go), spare room included."""
        if self._filled:
            self._k, self._v = self._k[indices, ...], self._v[indices, ...]

    def _grown(self, filled: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """A new buffer holding `filled` then `step`, with room for `reserve` more tokens."""
        b, h, _, d = step.shape
        n = filled.shape[-2] if filled is not None and filled.dim() == 4 else 0
        buffer = step.new_empty(b, h, n + step.shape[-2] + self.reserve, d)
        if n:
            buffer[..., :n, :] = filled
        buffer[..., n:n + step.shape[-2], :] = step
        return buffer


class GrowingCache(DynamicCache):
    """`DynamicCache` with `GrowingLayer`s: `GrowingCache(num_layers, reserve=max_new_tokens)`."""

    def __init__(self, num_layers: int, reserve: int):
        Cache.__init__(self, layers=[GrowingLayer(reserve) for _ in range(num_layers)])
