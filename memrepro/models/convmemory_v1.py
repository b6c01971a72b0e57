"""ConvMemory v1, the learned first stage, as the official code builds it (``pth2002/ConvMemory`` 0.7.0:
``convmemory/encoder.py``, ``scoring.py``, ``reranker.py``; docs/retrievers.md#convmemory-v1).

Per query: a pool (raw-dense top ``min(500, N)``); a windowed mixer encoder scores windows of 5 consecutive
memories in **chronological** order; each candidate gets the "CE-lite" MLP score over the official feature set;
the pool is ordered by ``0.025·z(raw) + 0.975·z(CE-lite)`` and the rest follows in raw dense order.

Feature row of a candidate (3,081 values for 768-d vectors), in the official order:
``q, m, q·m, |q−m|`` · z(raw cosine over the pool) · z(best window score) · raw rank in [0, 1] · chronological
position in [0, 1] · z(block-router cosine, blocks of 32) · 4 lexical-overlap features.

Module and parameter names match the official state dict, so the published checkpoint loads as is, and
parameters are created in the official order (same initial weights under the same torch seed). One difference in
*how* (not *what*) is computed: the mixer's input projection depends only on (memory, query), so it runs once per
memory and is gathered into the windows instead of once per window slot (5x less work; equal within float
rounding, tested against the official package).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Sequence

import numpy as np
import torch

from memrepro.models.convmemory_v1_shape import V1Architecture

# The official lexical tokenizer and stopword list (convmemory/scoring.py).
TOKEN_RE = re.compile(r"[A-Za-z0-9]+")
STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "did", "do", "does", "for", "from", "had", "has", "have", "he",
    "her", "him", "his", "i", "in", "is", "it", "of", "on", "or", "she", "that", "the", "their", "they", "to",
    "was", "were", "what", "when", "where", "which", "who", "why", "with",
})
WindowMode = Literal["full", "candidate_local"]
PARAMETERS_MPNET = 3_648_118  # the official model at 768 dimensions (asserted by the tests)


class MixerWindowEncoder(torch.nn.Module):
    """``MixerConvMemoryEncoder`` (output_mode="residual", score_mode="cosine"): a query-aware summary vector
    per window. ``score_head``/``score_gate`` exist (and count as parameters) but the cosine mode never uses them."""

    def __init__(self, a: V1Architecture) -> None:
        super().__init__()
        dim, hidden = a.dim, a.hidden_dim
        self.window_size = a.window_size
        self.input_proj = torch.nn.Sequential(torch.nn.Linear(dim * 3, hidden), torch.nn.GELU(),
                                              torch.nn.LayerNorm(hidden))
        self.conv_norm = torch.nn.LayerNorm(hidden)
        self.depthwise_conv = torch.nn.Conv1d(hidden, hidden, kernel_size=a.kernel_size,
                                              padding=a.kernel_size // 2, groups=hidden)
        self.pointwise = torch.nn.Linear(hidden, hidden)
        self.conv_gate = torch.nn.Parameter(torch.tensor(0.1))
        self.token_norm = torch.nn.LayerNorm(a.window_size)
        self.token_mlp = torch.nn.Sequential(torch.nn.Linear(a.window_size, a.token_mlp_dim), torch.nn.GELU(),
                                             torch.nn.Linear(a.token_mlp_dim, a.window_size))
        self.token_gate = torch.nn.Parameter(torch.tensor(0.1))
        self.channel_norm = torch.nn.LayerNorm(hidden)
        self.channel_mlp = torch.nn.Sequential(torch.nn.Linear(hidden, a.channel_mlp_dim), torch.nn.GELU(),
                                               torch.nn.Linear(a.channel_mlp_dim, hidden))
        self.channel_gate = torch.nn.Parameter(torch.tensor(0.1))
        self.query_proj = torch.nn.Linear(dim, hidden)
        self.attn_x = torch.nn.Linear(hidden, hidden, bias=False)
        self.attn_q = torch.nn.Linear(hidden, hidden, bias=False)
        self.attn_v = torch.nn.Linear(hidden, 1, bias=False)
        self.output_head = torch.nn.Sequential(torch.nn.Linear(hidden * 4, dim), torch.nn.LayerNorm(dim))
        self.output_gate = torch.nn.Parameter(torch.tensor(0.1))
        self.score_head = torch.nn.Sequential(torch.nn.Linear(dim * 4, hidden), torch.nn.GELU(),
                                              torch.nn.Linear(hidden, 1))
        self.score_gate = torch.nn.Parameter(torch.tensor(0.1))

    def window_scores(self, memories: torch.Tensor, windows: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        """Cosine of the query with each window's vector: ``memories (N, d)``, ``windows (W, w)`` indices into
        the memories (equal lengths), ``query (d,)`` → ``(W,)``."""
        x = memories[windows]  # (W, w, d)
        q = query.expand(x.shape[0], -1)
        q_norm = torch.nn.functional.normalize(q, dim=-1)
        base_scores = (torch.nn.functional.normalize(x, dim=-1) * q_norm[:, None, :]).sum(dim=-1)
        base = (x * torch.softmax(base_scores, dim=1)[:, :, None]).sum(dim=1)
        # input projection once per memory (it depends on the memory and the query only), gathered into windows
        per_memory = torch.cat([memories, memories * query, torch.abs(memories - query)], dim=-1)
        h = self.input_proj(per_memory)[windows]
        conv_out = self.depthwise_conv(self.conv_norm(h).transpose(1, 2)).transpose(1, 2)
        h = h + self.conv_gate * self.pointwise(torch.nn.functional.gelu(conv_out))
        h = h + self.token_gate * self._token_mix(h)
        h = h + self.channel_gate * self.channel_mlp(self.channel_norm(h))
        qh = self.query_proj(q)
        attn = self.attn_v(torch.tanh(self.attn_x(h) + self.attn_q(qh)[:, None, :])).squeeze(-1)
        pooled = (h * torch.softmax(attn, dim=1)[:, :, None]).sum(dim=1)
        out = self.output_head(torch.cat([pooled, qh, pooled * qh, torch.abs(pooled - qh)], dim=-1))
        vectors = torch.nn.functional.normalize(base + self.output_gate * out, dim=-1)
        return vectors @ query

    def _token_mix(self, h: torch.Tensor) -> torch.Tensor:
        length = h.shape[1]
        if length < self.window_size:  # a conversation shorter than one window: zero-pad the token axis
            h = torch.cat([h, h.new_zeros(h.shape[0], self.window_size - length, h.shape[2])], dim=1)
        mixed = self.token_mlp(self.token_norm(h.transpose(1, 2))).transpose(1, 2)
        return mixed[:, :length]


class CELiteHead(torch.nn.Module):
    """The "CE-lite" scorer: an MLP over one feature row per candidate."""

    def __init__(self, a: V1Architecture) -> None:
        super().__init__()
        self.input_dim = a.dim * 4 + 4 + a.extra_scalar_features
        self.net = torch.nn.Sequential(torch.nn.Linear(self.input_dim, a.hidden_dim), torch.nn.GELU(),
                                       torch.nn.LayerNorm(a.hidden_dim),
                                       torch.nn.Linear(a.hidden_dim, a.hidden_dim // 2), torch.nn.GELU(),
                                       torch.nn.Linear(a.hidden_dim // 2, 1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features).squeeze(-1)


class ConvMemoryV1(torch.nn.Module):
    """The two official components under their official names (``conv_model``, ``scorer``), built in the
    official order (encoder first), so ``torch.manual_seed(s)`` gives the official initial weights."""

    def __init__(self, architecture: V1Architecture = V1Architecture()) -> None:
        super().__init__()
        self.architecture = architecture
        self.conv_model = MixerWindowEncoder(architecture)
        self.scorer = CELiteHead(architecture)

    def official_state(self) -> dict:
        """``{"conv_model": …, "scorer": …}``: the layout of the official ``model.pt``."""
        return {"conv_model": self.conv_model.state_dict(), "scorer": self.scorer.state_dict()}

    def load_official_state(self, state: dict) -> None:
        self.conv_model.load_state_dict(state["conv_model"])
        self.scorer.load_state_dict(state["scorer"])


# ---------------------------------------------------------------------------------------------------------------
# One query's inputs and features


def sliding_windows(n: int, size: int) -> np.ndarray:
    """Every window of ``size`` consecutive memories, stride 1 (one window of all memories when n ≤ size)."""
    if n <= 0:
        return np.zeros((0, 0), dtype=np.int64)
    if n <= size:
        return np.arange(n, dtype=np.int64)[None, :]
    return np.arange(n - size + 1, dtype=np.int64)[:, None] + np.arange(size, dtype=np.int64)[None, :]


def candidate_local_windows(n: int, candidates: np.ndarray, size: int) -> np.ndarray:
    """One window centred on each candidate's chronological index (clipped at the ends), de-duplicated in
    candidate order (official ``candidate_local_windows``)."""
    if n <= size:
        return sliding_windows(n, size)
    starts = np.clip(np.asarray(candidates, dtype=np.int64) - size // 2, 0, n - size)
    _, first = np.unique(starts, return_index=True)
    starts = starts[np.sort(first)]
    return starts[:, None] + np.arange(size, dtype=np.int64)[None, :]


def windows_for(mode: WindowMode, n: int, candidates: np.ndarray, size: int) -> np.ndarray:
    if mode == "full":
        return sliding_windows(n, size)
    if mode == "candidate_local":
        return candidate_local_windows(n, candidates, size)
    raise ValueError(f"window_mode must be 'full' or 'candidate_local', got {mode!r}")


def zscore_np(values: np.ndarray) -> np.ndarray:
    """The official ``normalize_scores``: float32, population std, centred only when the std is < 1e-8."""
    values = np.asarray(values, dtype=np.float32)
    std = float(values.std())
    if std < 1e-8:
        return values - float(values.mean())
    return (values - float(values.mean())) / std


def _zscore_t(values: torch.Tensor) -> torch.Tensor:
    return (values - values.mean()) / (values.std(unbiased=False) + 1e-6)


@lru_cache(maxsize=250_000)
def lexical_signature(text: str) -> tuple[frozenset, frozenset]:
    tokens = tuple(t for t in TOKEN_RE.findall(str(text).lower()) if len(t) > 1 and t not in STOPWORDS)
    return frozenset(tokens), frozenset(zip(tokens, tokens[1:]))


def lexical_features(query: str, texts: Sequence[str]) -> np.ndarray:
    """Per candidate: overlap / |query|, Jaccard, bigram overlap / |query bigrams|, log1p(overlap)/log1p(|q|)."""
    q_set, q_bigrams = lexical_signature(query)
    rows = []
    for text in texts:
        m_set, m_bigrams = lexical_signature(text)
        overlap = len(q_set & m_set)
        rows.append([overlap / max(1, len(q_set)), overlap / max(1, len(q_set | m_set)),
                     len(q_bigrams & m_bigrams) / max(1, len(q_bigrams)),
                     np.log1p(overlap) / np.log1p(max(1, len(q_set)))])
    return np.asarray(rows, dtype=np.float32).reshape(len(texts), 4)


def router_scores(memories: np.ndarray, query: np.ndarray, candidates: np.ndarray, block: int) -> np.ndarray:
    """Cosine of the query with the mean vector of each candidate's chronological block of ``block`` memories."""
    n = memories.shape[0]
    block_ids = np.arange(n) // max(1, block)
    sums = np.zeros((int(block_ids.max()) + 1, memories.shape[1]), dtype=np.float32)
    for b in range(sums.shape[0]):
        sums[b] = memories[block_ids == b].mean(axis=0)
    sums = sums / (np.linalg.norm(sums, axis=1, keepdims=True) + 1e-8)
    q = query / (np.linalg.norm(query) + 1e-8)
    return (sums @ q)[block_ids[candidates]].astype(np.float32)


@dataclass
class QueryInputs:
    """Everything v1 reads for one query: unit vectors in chronological order, the memory texts, the pool."""

    query_text: str
    query_vector: np.ndarray  # (d,) float32
    memory_vectors: np.ndarray  # (N, d) float32, chronological (pool position) order
    memory_texts: Sequence[str]
    candidates: np.ndarray  # pool positions, raw dense order (the first min(pool, N))
    raw_scores: np.ndarray  # (N,) cosine of every memory


def features(model: ConvMemoryV1, inputs: QueryInputs, windows: np.ndarray) -> torch.Tensor:
    """The official ``candidate_features`` rows for ``inputs.candidates``; differentiable through the model."""
    a = model.architecture
    cand = inputs.candidates
    memories = torch.from_numpy(np.ascontiguousarray(inputs.memory_vectors, dtype=np.float32))
    query = torch.from_numpy(np.ascontiguousarray(inputs.query_vector, dtype=np.float32))
    window_index = torch.from_numpy(windows)
    window_logits = model.conv_model.window_scores(memories, window_index, query)
    # best window per candidate: max over the windows that contain it (the lowest window score when none does)
    touching = np.zeros((len(cand), len(windows)), dtype=bool)
    where = {int(c): i for i, c in enumerate(cand)}
    for w, window in enumerate(windows.tolist()):
        for memory in window:
            i = where.get(memory)
            if i is not None:
                touching[i, w] = True
    mask = torch.from_numpy(touching)
    best = window_logits[None, :].expand(len(cand), -1).masked_fill(~mask, float("-inf")).max(dim=1).values
    best = torch.where(mask.any(dim=1), best, window_logits.min())
    extra = []
    if a.router_block_size > 0:
        router = torch.from_numpy(router_scores(inputs.memory_vectors, inputs.query_vector, cand,
                                                a.router_block_size))
        extra.append(_zscore_t(router)[:, None])
    if a.lexical_features:
        extra.append(torch.from_numpy(lexical_features(inputs.query_text, [inputs.memory_texts[int(c)]
                                                                           for c in cand])))
    m = memories[torch.from_numpy(cand)]
    q = query[None, :].expand(len(cand), -1)
    raw_rank = torch.linspace(0.0, 1.0, steps=len(cand), dtype=torch.float32)
    position = torch.tensor(cand / max(1, len(inputs.memory_vectors) - 1), dtype=torch.float32)
    raw_norm = torch.from_numpy(zscore_np(inputs.raw_scores[cand]))
    return torch.cat([q, m, q * m, torch.abs(q - m), raw_norm[:, None], _zscore_t(best)[:, None],
                      raw_rank[:, None], position[:, None], *extra], dim=-1)


def ce_lite_scores(model: ConvMemoryV1, inputs: QueryInputs, window_mode: WindowMode) -> np.ndarray:
    """CE-lite score of every pool candidate (inference, no gradient)."""
    windows = windows_for(window_mode, len(inputs.memory_vectors), inputs.candidates, model.architecture.window_size)
    with torch.no_grad():
        return model.scorer(features(model, inputs, windows)).numpy()


def fuse(raw_pool: np.ndarray, ce_lite: np.ndarray, raw_weight: float) -> np.ndarray:
    """``raw_weight·z(raw) + (1 − raw_weight)·z(CE-lite)`` over the pool, float32 as the official code."""
    return raw_weight * zscore_np(raw_pool) + (1.0 - raw_weight) * zscore_np(ce_lite)
