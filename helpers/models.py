"""Small seeded models: an MLP, a residual MLP of blocks, a CNN with batch/group/no norm, and a
tiny causal Transformer LM."""

from __future__ import annotations

import torch
from torch import nn

from helpers import validate


class MLP(nn.Module):
    """Linear+ReLU stack with `depth` hidden layers: x float [B, in] -> float [B, out]."""

    def __init__(self, in_features: int, hidden: int, out_features: int, depth: int = 2,
                 seed: int = 0):
        super().__init__()
        validate.positive_int(in_features, "in_features")
        validate.positive_int(hidden, "hidden")
        validate.positive_int(out_features, "out_features")
        validate.positive_int(depth, "depth")
        self.in_features = in_features
        torch.manual_seed(validate.seed(seed))
        layers: list[nn.Module] = []
        width = in_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, out_features))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map x float [B, in_features] to float [B, out_features]."""
        if x.dim() < 1 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"MLP expected inputs of shape [batch, {self.in_features}], got {list(x.shape)}"
            )
        return self.layers(x)


def _norm_layer(norm: str, channels: int) -> nn.Module:
    if norm == "batch":
        return nn.BatchNorm2d(channels)
    if norm == "group":
        num_groups = next(g for g in (4, 2, 1) if channels % g == 0)
        return nn.GroupNorm(num_groups, channels)
    return nn.Identity()


class SmallCNN(nn.Module):
    """Three conv blocks, global average pool, linear: x float [B, C, H, W] -> logits [B, K]."""

    NORMS = ("batch", "group", "none")

    def __init__(self, in_channels: int = 3, num_classes: int = 10, width: int = 16,
                 norm: str = "batch", seed: int = 0):
        super().__init__()
        validate.positive_int(in_channels, "in_channels")
        validate.positive_int(num_classes, "num_classes")
        validate.positive_int(width, "width")
        if norm not in self.NORMS:
            raise ValueError(f"norm must be one of {self.NORMS}, got {norm!r}")
        self.in_channels = in_channels
        self.norm = norm
        torch.manual_seed(validate.seed(seed))
        # A following norm layer has its own shift, so a conv bias would be redundant.
        use_bias = norm == "none"
        channels = [in_channels, width, 2 * width, 2 * width]
        blocks: list[nn.Module] = []
        for index, (c_in, c_out) in enumerate(zip(channels[:-1], channels[1:], strict=True)):
            stride = 1 if index == 0 else 2
            blocks += [
                nn.Conv2d(c_in, c_out, kernel_size=3, stride=stride, padding=1, bias=use_bias),
                _norm_layer(norm, c_out),
                nn.ReLU(),
            ]
        self.features = nn.Sequential(*blocks)
        self.head = nn.Linear(channels[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map images float [B, C, H, W] to logits float [B, num_classes]."""
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"SmallCNN expected images of shape [batch, {self.in_channels}, height, width], "
                f"got {list(x.shape)}"
            )
        features = self.features(x)
        return self.head(features.mean(dim=(2, 3)))


class TinyLM(nn.Module):
    """Causal pre-LN Transformer LM: tokens int64 [B, T] -> logits float [B, T, vocab_size]."""

    def __init__(self, vocab_size: int, d_model: int = 32, n_heads: int = 2, n_layers: int = 2,
                 max_length: int = 128, seed: int = 0):
        super().__init__()
        validate.positive_int(vocab_size, "vocab_size")
        validate.positive_int(d_model, "d_model")
        validate.positive_int(n_heads, "n_heads")
        validate.positive_int(n_layers, "n_layers")
        validate.positive_int(max_length, "max_length")
        if d_model % n_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.vocab_size = vocab_size
        self.max_length = max_length
        torch.manual_seed(validate.seed(seed))
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_length, d_model)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(
                d_model, n_heads, dim_feedforward=4 * d_model, dropout=0.0, activation="gelu",
                batch_first=True, norm_first=True,
            )
            for _ in range(n_layers)
        )
        self.final_norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Map token ids int [B, T] (T <= max_length) to next-token logits float [B, T, vocab]."""
        if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise TypeError(f"TinyLM expects integer token ids, got dtype {tokens.dtype}")
        if tokens.dim() != 2:
            raise ValueError(
                f"TinyLM expects tokens of shape [batch, time], got {list(tokens.shape)}"
            )
        length = tokens.shape[1]
        if length > self.max_length:
            raise ValueError(f"sequence length {length} exceeds max_length={self.max_length}")
        # Only checked on CPU: on a GPU the check would force a sync in every forward, and an
        # out-of-range id there fails as an opaque device-side assert instead.
        if tokens.device.type == "cpu" and tokens.numel() > 0:
            low, high = int(tokens.min()), int(tokens.max())
            if low < 0 or high >= self.vocab_size:
                raise ValueError(
                    f"token ids must lie in [0, {self.vocab_size}), got values in [{low}, {high}]"
                )
        positions = torch.arange(length, device=tokens.device)
        h = self.token_embedding(tokens) + self.position_embedding(positions)
        causal_mask = nn.Transformer.generate_square_subsequent_mask(
            length, device=tokens.device, dtype=h.dtype
        )
        for block in self.blocks:
            h = block(h, src_mask=causal_mask, is_causal=True)
        return self.head(self.final_norm(h))


class ResidualBlock(nn.Module):
    """x + Linear(GELU(Linear(LayerNorm(x)))): float [B, dim] -> float [B, dim]."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.act(self.up(self.norm(x))))


class ResidualMLP(nn.Module):
    """`depth` residual blocks in `self.blocks` (an nn.ModuleList): x float [B, dim] -> [B, dim]."""

    def __init__(self, dim: int, hidden: int, depth: int, seed: int = 0):
        super().__init__()
        validate.positive_int(dim, "dim")
        validate.positive_int(hidden, "hidden")
        validate.positive_int(depth, "depth")
        self.dim = dim
        torch.manual_seed(validate.seed(seed))
        self.blocks = nn.ModuleList(ResidualBlock(dim, hidden) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != self.dim:
            raise ValueError(f"ResidualMLP expected inputs of shape [batch, {self.dim}], got {list(x.shape)}")
        for block in self.blocks:
            x = block(x)
        return x


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Return the number of scalar parameters of `model` (shared parameters counted once)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
