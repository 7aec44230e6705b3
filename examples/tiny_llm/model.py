"""A tiny decoder-only transformer with a KV cache that can start from stored KV.

Random weights (fixed seed), real causal multi-head attention. The cache of a
sequence is a list of KV *segments* per layer: first the blocks another
instance stored (views straight into shared memory, never copied), then this
instance's own buffer for what it computed itself. Attention runs over the
segments one by one, as a paged-attention kernel walks a block table, so
mapped blocks are read where they lie.

Determinism: `deterministic()` turns on torch's deterministic algorithms and
one intra-op thread, so two processes computing the same thing from the same
bytes get bit-identical logits. Reusing KV is bit-identical to reusing the
same KV from process memory; against a full recompute it is only allclose,
because matrix products of other shapes round differently.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch.utils import mkldnn


@dataclass(frozen=True)
class Config:
    vocab: int = 1000
    d_model: int = 256
    n_heads: int = 4
    n_layers: int = 4
    d_ff: int = 1024
    max_seq: int = 4096
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def tag(self) -> str:
        """Names the model in chunk keys: other weights never share KV."""
        return (f"tiny-v1-s{self.seed}-L{self.n_layers}-d{self.d_model}"
                f"-h{self.n_heads}-v{self.vocab}")


def deterministic() -> None:
    """Bitwise-reproducible CPU math: same thread count, same kernels."""
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def matmul_t(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b.T for 2-D tensors through oneDNN: Debian's torch multiplies with
    the reference BLAS, which is several times slower here."""
    return torch._C._nn.mkldnn_linear(a.to_mkldnn(), b.to_mkldnn()).to_dense()


def bmm_t(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b.transpose(1, 2) for [heads, m, k] x [heads, n, k]. Small products
    go to torch's bmm; large ones, head by head, to oneDNN, whose conversions
    cost more than they save on small ones. The choice depends on the shapes
    only, so every process computing the same thing computes it the same way."""
    heads, m, k = a.shape
    if m * b.shape[1] * k < (1 << 18):
        return a @ b.transpose(1, 2)
    return torch.stack([matmul_t(a[h], b[h]) for h in range(heads)])


class KVCache:
    """The KV of one sequence: borrowed prefix segments, then an own buffer.

    prefix[l] holds (k, v) views of shape [heads, t, head_dim] that this
    cache does not own (mapped blocks); own_k/own_v[l] hold what this
    instance computed, written in place as tokens arrive.
    """

    def __init__(self, cfg: Config, capacity: int):
        self.cfg = cfg
        shape = (cfg.n_heads, capacity, cfg.head_dim)
        self.prefix: List[List[Tuple[torch.Tensor, torch.Tensor]]] = [
            [] for _ in range(cfg.n_layers)]
        self.own_k = [torch.empty(shape) for _ in range(cfg.n_layers)]
        self.own_v = [torch.empty(shape) for _ in range(cfg.n_layers)]
        self.prefix_len = 0
        self.own_len = 0

    def __len__(self) -> int:
        return self.prefix_len + self.own_len

    def add_prefix(self, per_layer: Sequence[Tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Appends one borrowed segment (one (k, v) per layer), before any own KV."""
        assert self.own_len == 0, "borrowed KV must come before computed KV"
        for layer, kv in enumerate(per_layer):
            self.prefix[layer].append(kv)
        self.prefix_len += per_layer[0][0].shape[1]

    def segments(self, layer: int, new: int):
        """(k, v) segments of `layer` including `new` tokens just written."""
        end = self.own_len + new
        own = (self.own_k[layer][:, :end], self.own_v[layer][:, :end])
        return self.prefix[layer] + ([own] if end else [])

    def own_range(self, start: int, end: int, layer: int):
        """This instance's computed K and V for absolute positions [start, end)."""
        a, b = start - self.prefix_len, end - self.prefix_len
        assert 0 <= a <= b <= self.own_len
        return self.own_k[layer][:, a:b], self.own_v[layer][:, a:b]


class Block(torch.nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.ln1 = torch.nn.LayerNorm(cfg.d_model)
        self.qkv = torch.nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out = torch.nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = torch.nn.LayerNorm(cfg.d_model)
        self.up = torch.nn.Linear(cfg.d_model, cfg.d_ff)
        self.down = torch.nn.Linear(cfg.d_ff, cfg.d_model)

    def forward(self, x: torch.Tensor, cache: KVCache, layer: int) -> torch.Tensor:
        x = x + self.attend(self.ln1(x), cache, layer)
        return x + self.down(F.gelu(self.up(self.ln2(x))))

    def attend(self, x: torch.Tensor, cache: KVCache, layer: int) -> torch.Tensor:
        cfg, t = self.cfg, x.shape[0]
        q, k, v = self.qkv(x).view(t, 3, cfg.n_heads, cfg.head_dim).permute(1, 2, 0, 3)
        at = cache.own_len
        cache.own_k[layer][:, at:at + t] = k
        cache.own_v[layer][:, at:at + t] = v
        segs = cache.segments(layer, t)
        scores = torch.cat([bmm_t(q, sk) for sk, _ in segs], dim=2)
        scores = scores * (1.0 / math.sqrt(cfg.head_dim))
        past = len(cache)  # positions before the new tokens
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        scores[:, :, past:].masked_fill_(causal, float("-inf"))
        probs = torch.softmax(scores, dim=2)
        out, off = None, 0
        for _, sv in segs:  # weighted sum segment by segment: they are never concatenated
            part = bmm_t(probs[:, :, off:off + sv.shape[1]], sv.transpose(1, 2))
            out = part if out is None else out + part
            off += sv.shape[1]
        return self.out(out.permute(1, 0, 2).reshape(t, cfg.d_model))


class TinyLM(torch.nn.Module):
    def __init__(self, cfg: Config = Config()):
        super().__init__()
        self.cfg = cfg
        gen = torch.Generator().manual_seed(cfg.seed)
        self.tok = torch.nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = torch.nn.Embedding(cfg.max_seq, cfg.d_model)
        self.blocks = torch.nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln = torch.nn.LayerNorm(cfg.d_model)
        self.head = torch.nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self._init(gen)
        self.eval()
        # Debian's torch multiplies matrices with the reference BLAS; oneDNN
        # (MKL-DNN) runs the projections ~20x faster, and as deterministically.
        self.blocks = mkldnn.to_mkldnn(self.blocks)
        self.head = mkldnn.to_mkldnn(self.head)

    @torch.no_grad()
    def _init(self, gen: torch.Generator) -> None:
        # Weights of unit-scale activations: logits spread widely, so greedy
        # choices are far from ties and rounding cannot flip them.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif p.dim() == 1:
                p.fill_(1.0)
            elif "tok" in name or "pos" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))

    def new_cache(self, capacity: int) -> KVCache:
        return KVCache(self.cfg, capacity)

    @torch.no_grad()
    def forward(self, tokens: Sequence[int], cache: KVCache) -> torch.Tensor:
        """Runs `tokens` after what `cache` holds; returns the logits of the last [vocab]."""
        ids = torch.as_tensor(list(tokens), dtype=torch.long)
        start = len(cache)
        pos = torch.arange(start, start + len(ids))
        x = self.tok(ids) + self.pos(pos)
        for layer, block in enumerate(self.blocks):
            x = block(x, cache, layer)
        cache.own_len += len(ids)
        return self.head(self.ln(x[-1:]))[0]

    def greedy(self, last_logits: torch.Tensor, cache: KVCache, n: int):
        """Decodes n tokens greedily; returns (tokens, logits [n, vocab])."""
        tokens, logits = [], []
        cur = last_logits
        for _ in range(n):
            tok = int(torch.argmax(cur))
            tokens.append(tok)
            step = self.forward([tok], cache)
            logits.append(step)
            cur = step
        return tokens, torch.stack(logits) if logits else torch.empty(0, self.cfg.vocab)


def linear_in_dtype(m: Any, dtype: torch.dtype) -> Any:
    """A linear layer (plain or oneDNN) computing in ``dtype`` through oneDNN."""
    lin = torch.nn.Linear(m.weight.shape[1], m.weight.shape[0], bias=m.bias is not None)
    with torch.no_grad():
        lin.weight.copy_(m.weight.to_dense())
        if m.bias is not None:
            lin.bias.copy_(m.bias.to_dense())
    return mkldnn.to_mkldnn(lin, dtype)


def block_in_dtype(block: Any, dtype: torch.dtype) -> Any:
    """A transformer block computing in ``dtype`` (projections in oneDNN)."""
    for name in ("qkv", "out", "up", "down"):
        setattr(block, name, linear_in_dtype(getattr(block, name), dtype))
    block.ln1, block.ln2 = block.ln1.to(dtype), block.ln2.to(dtype)
    return block


def random_prompt(seed: int, n: int) -> list:
    """``n`` token ids in [0, 1000), the same for the same ``seed``."""
    rng = random.Random(seed)
    return [rng.randrange(1000) for _ in range(n)]
