"""ConvMemory v1's model shape, without torch: read by the network (:mod:`memrepro.models.convmemory_v1`), the
checkpoint loader and trainer (:mod:`memrepro.training.convmemory_v1`) and the config schema (``retriever.model.*``
of ``retriever=convmemory_v1``), so that every default of the shape is written once, here."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class V1Architecture:
    """The published model's shape (``build_default_components`` + ``RerankConfig`` of the LoCoMo checkpoint)."""

    dim: int = 768
    window_size: int = 5
    kernel_size: int = 3
    hidden_dim: int = 256
    token_mlp_dim: int = 32
    channel_mlp_dim: int = 512
    router_block_size: int = 32  # "dca_router_block_size": the block-router scalar (≈ 0 contribution, kept)
    lexical_features: bool = True
    pool: int = 500  # candidate_top_n
    raw_weight: float = 0.025

    @property
    def extra_scalar_features(self) -> int:
        return (1 if self.router_block_size > 0 else 0) + (4 if self.lexical_features else 0)

    def model_config(self) -> dict:
        """The official ``config.json`` ``model_config`` block."""
        return {"embedding_dim": self.dim, "window_size": self.window_size, "kernel_size": self.kernel_size,
                "hidden_dim": self.hidden_dim, "token_mlp_dim": self.token_mlp_dim,
                "channel_mlp_dim": self.channel_mlp_dim, "extra_scalar_features": self.extra_scalar_features}

    def to_dict(self) -> dict:
        return asdict(self)


V1_DEFAULT_SHAPE = V1Architecture()  # the published model's shape, every default above
WINDOW_MODES = ("candidate_local", "full")  # CE-lite windows: around each candidate | over the whole pool
