"""What the checks of several exercises share: the {name: tensor} dicts they compare, and reading
one that a collector sent back from the student's kernel."""

from __future__ import annotations

import torch

from helpers.grads import GradDict


def _same_tensors(data, like: GradDict) -> GradDict | None:
    """`data` if it is a {name: tensor} of `like`'s names and shapes (as a kernel should send), else None."""
    if not (isinstance(data, dict) and data.keys() == like.keys()):
        return None
    if not all(isinstance(data[name], torch.Tensor) and data[name].shape == tensor.shape
               for name, tensor in like.items()):
        return None
    return data
