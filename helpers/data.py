"""Synthetic, seeded data made on the fly: blobs, images, token sequences, a slow dataset."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch
from torch.utils.data import Dataset

from helpers import validate
from helpers.transport import wire


def _generator(seed: int) -> torch.Generator:
    # A local generator keeps the data identical for a seed whatever the notebook did before.
    return torch.Generator().manual_seed(validate.seed(seed))


def _balanced_labels(num_samples: int, num_classes: int, generator: torch.Generator):
    labels = torch.arange(num_samples) % num_classes
    return labels[torch.randperm(num_samples, generator=generator)]


def make_blobs(num_samples: int, num_features: int, num_classes: int, seed: int = 0):
    """Return Gaussian class clusters: x float32 [N, F], y int64 [N] in [0, num_classes)."""
    validate.positive_int(num_samples, "num_samples")
    validate.positive_int(num_features, "num_features")
    validate.positive_int(num_classes, "num_classes")
    generator = _generator(seed)
    # Centres a few standard deviations apart keep the classes separable but not trivially so.
    centers = 2.0 * torch.randn(num_classes, num_features, generator=generator)
    y = _balanced_labels(num_samples, num_classes, generator)
    x = centers[y] + torch.randn(num_samples, num_features, generator=generator)
    return x, y


def make_images(
    num_samples: int,
    channels: int = 3,
    size: int = 16,
    num_classes: int = 10,
    seed: int = 0,
):
    """Return noisy striped images: x float32 [N, C, H, W] (H = W = size), y int64 [N]."""
    validate.positive_int(num_samples, "num_samples")
    validate.positive_int(channels, "channels")
    validate.positive_int(num_classes, "num_classes")
    if validate.positive_int(size, "size") < 4:
        raise ValueError(f"size must be at least 4 pixels, got {size}")
    generator = _generator(seed)
    y = _balanced_labels(num_samples, num_classes, generator)
    # Each class is a grating with its own orientation, frequency and colour; a random phase per
    # image makes the pattern translation-invariant, which a conv net with global pooling can learn.
    angles = math.pi * torch.arange(num_classes) / num_classes
    frequencies = 1.0 + (torch.arange(num_classes) % 3).float()
    colours = torch.rand(num_classes, channels, generator=generator) + 0.5
    phases = 2 * math.pi * torch.rand(num_samples, generator=generator)
    coords = torch.arange(size, dtype=torch.float32) / size
    rows, cols = torch.meshgrid(coords, coords, indexing="ij")
    cosines, sines = torch.cos(angles[y])[:, None, None], torch.sin(angles[y])[:, None, None]
    direction = cosines * cols + sines * rows
    waves = torch.cos(2 * math.pi * frequencies[y][:, None, None] * direction
                      + phases[:, None, None])
    x = colours[y][:, :, None, None] * waves[:, None]
    x = x + 0.5 * torch.randn(num_samples, channels, size, size, generator=generator)
    return x, y


def make_token_sequences(
    num_sequences: int,
    vocab_size: int,
    min_length: int,
    max_length: int,
    seed: int = 0,
    noise: float = 0.1,
) -> list[torch.Tensor]:
    """Return int64 1-D sequences, lengths uniform in [min_length, max_length], ids in [1, V)."""
    validate.positive_int(num_sequences, "num_sequences")
    validate.positive_int(min_length, "min_length")
    validate.positive_int(max_length, "max_length")
    if validate.positive_int(vocab_size, "vocab_size") < 2:
        raise ValueError(f"vocab_size must be at least 2 (id 0 is padding), got {vocab_size}")
    if min_length > max_length:
        raise ValueError(f"min_length ({min_length}) must not exceed max_length ({max_length})")
    if not 0 <= noise <= 1:
        raise ValueError(f"noise must be a probability in [0, 1], got {noise}")
    generator = _generator(seed)
    num_real_tokens = vocab_size - 1
    lengths = torch.randint(min_length, max_length + 1, (num_sequences,), generator=generator)
    # Each sequence counts up with its own stride, so the next token is predictable from the
    # previous two; `noise` replaces a few tokens at random so the loss never reaches zero.
    starts = torch.randint(0, num_real_tokens, (num_sequences,), generator=generator)
    strides = torch.randint(1, 4, (num_sequences,), generator=generator)
    sequences = []
    columns = (lengths.tolist(), starts.tolist(), strides.tolist())
    for length, start, stride in zip(*columns, strict=True):
        tokens = 1 + (start + stride * torch.arange(length)) % num_real_tokens
        replaced = torch.rand(length, generator=generator) < noise
        random_tokens = torch.randint(1, vocab_size, (length,), generator=generator)
        sequences.append(torch.where(replaced, random_tokens, tokens))
    return sequences


def lm_batch(sequences: Sequence[torch.Tensor], pad_id: int = 0, ignore_index: int = -100):
    """Pad 1-D int sequences into next-token inputs and targets, both int64 [B, T-1].

    T is the longest length. Row b of inputs is sequence b right-padded with pad_id to T, minus
    its last column; targets[b, t] is token t+1 where that is a real token, else ignore_index.
    """
    if isinstance(sequences, torch.Tensor) or not isinstance(sequences, Sequence):
        raise TypeError("sequences must be a list of 1-D integer tensors")
    if len(sequences) == 0:
        raise ValueError("sequences is empty: a batch needs at least one sequence")
    for index, sequence in enumerate(sequences):
        if not isinstance(sequence, torch.Tensor):
            raise TypeError(f"sequence {index} is a {type(sequence).__name__}, not a tensor")
        if sequence.dim() != 1:
            raise ValueError(f"sequence {index} must be 1-D, got shape {list(sequence.shape)}")
        if sequence.dtype.is_floating_point or sequence.dtype.is_complex:
            raise TypeError(f"sequence {index} must hold integer token ids, got {sequence.dtype}")
        if sequence.device != sequences[0].device:
            raise ValueError(
                f"sequence {index} is on {sequence.device} but sequence 0 is on "
                f"{sequences[0].device}; put them on one device"
            )
        if len(sequence) < 2:
            raise ValueError(
                f"sequence {index} has {len(sequence)} token(s); next-token prediction needs >= 2"
            )
    device = sequences[0].device
    longest = max(len(sequence) for sequence in sequences)
    padded = torch.full((len(sequences), longest), pad_id, dtype=torch.int64, device=device)
    targets = torch.full((len(sequences), longest - 1), ignore_index, dtype=torch.int64,
                         device=device)
    for row, sequence in enumerate(sequences):
        padded[row, : len(sequence)] = sequence
        targets[row, : len(sequence) - 1] = sequence[1:]
    return padded[:, :-1], targets


def count_target_tokens(targets: torch.Tensor, ignore_index: int = -100) -> int:
    """Return how many entries of an integer targets tensor (any shape) differ from ignore_index."""
    if not isinstance(targets, torch.Tensor):
        raise TypeError(f"targets must be a tensor, got {type(targets).__name__}")
    if targets.dtype.is_floating_point or targets.dtype.is_complex:
        raise TypeError(f"targets must hold integer class ids, got {targets.dtype}")
    return int((targets != ignore_index).sum().item())


def _check_pair(x: torch.Tensor, y: torch.Tensor) -> None:
    for name, value in (("x", x), ("y", y)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(value).__name__}")
        if value.dim() == 0:
            raise ValueError(f"{name} must have a batch dimension, got a 0-d tensor")
    if len(x) != len(y):
        raise ValueError(
            f"x and y must have the same size along dim 0, got {len(x)} and {len(y)}"
        )
    if len(x) == 0:
        raise ValueError("x is empty: there is nothing to split")


def split_micro_batches(x: torch.Tensor, y: torch.Tensor, micro_batch_size: int):
    """Slice (x [N, ...], y [N, ...]) along dim 0 into micro-batches; the last may be smaller."""
    _check_pair(x, y)
    validate.positive_int(micro_batch_size, "micro_batch_size")
    return list(zip(x.split(micro_batch_size), y.split(micro_batch_size), strict=True))


def split_by_sizes(x: torch.Tensor, y: torch.Tensor, sizes: Sequence[int]):
    """Slice (x [N, ...], y [N, ...]) along dim 0 into consecutive pieces of the given sizes."""
    _check_pair(x, y)
    if isinstance(sizes, torch.Tensor) or not isinstance(sizes, Sequence) or len(sizes) == 0:
        raise ValueError("sizes must be a non-empty list of positive ints")
    for size in sizes:
        validate.positive_int(size, "every size")
    if sum(sizes) != len(x):
        raise ValueError(f"sizes add up to {sum(sizes)} but x has {len(x)} samples")
    return list(zip(x.split(list(sizes)), y.split(list(sizes)), strict=True))


# A check builds the dataset and hands it to the student's epoch in the kernel: it travels there whole.
@wire.carried("features", "labels", "delay_s")
class SlowDataset(Dataset):
    """Blob samples that take `delay_s` each to load, like decoding or augmenting real data."""

    def __init__(
        self,
        num_samples: int,
        num_features: int,
        num_classes: int = 10,
        delay_s: float = 0.002,
        seed: int = 0,
    ):
        if not delay_s >= 0:
            raise ValueError(f"delay_s must be >= 0 seconds, got {delay_s}")
        self.features, self.labels = make_blobs(num_samples, num_features, num_classes, seed)
        self.delay_s = float(delay_s)

    def __len__(self) -> int:
        """Return the number of samples N."""
        return len(self.labels)

    def __getitem__(self, index: int):
        """Return sample `index` after sleeping delay_s: (x float32 [F], y int64 [])."""
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} is out of range for a dataset of {len(self)}")
        time.sleep(self.delay_s)
        # Clones, so that a worker sends one sample rather than the whole backing storage.
        return self.features[index].clone(), self.labels[index].clone()
