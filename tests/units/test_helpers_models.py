"""Unit tests of helpers.models."""

import pytest
import torch
from torch import nn

from helpers.models import MLP, SmallCNN, TinyLM, count_parameters


def _same_weights(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_mlp_shapes_and_depth():
    model = MLP(20, 16, 3, depth=3)
    assert model(torch.randn(8, 20)).shape == (8, 3)
    assert sum(isinstance(m, nn.Linear) for m in model.modules()) == 4
    assert sum(isinstance(m, nn.Dropout) for m in model.modules()) == 0


def test_mlp_rejects_wrong_features():
    expected = r"MLP expected inputs of shape \[batch, 20\], got \[8, 3\]"
    with pytest.raises(ValueError, match=expected):
        MLP(20, 16, 3)(torch.randn(8, 3))
    with pytest.raises(ValueError, match="depth must be positive"):
        MLP(2, 4, 1, depth=0)


@pytest.mark.parametrize("make", [
    lambda seed: MLP(4, 8, 2, seed=seed),
    lambda seed: SmallCNN(seed=seed),
    lambda seed: TinyLM(11, seed=seed),
])
def test_same_seed_same_weights(make):
    assert _same_weights(make(0), make(0))
    assert not _same_weights(make(0), make(1))


def test_forward_is_deterministic():
    model = TinyLM(11)
    tokens = torch.randint(0, 11, (2, 7))
    assert torch.equal(model(tokens), model(tokens))


@pytest.mark.parametrize("norm", ["batch", "group", "none"])
def test_small_cnn_shapes(norm):
    model = SmallCNN(in_channels=2, num_classes=5, width=8, norm=norm)
    assert model(torch.randn(4, 2, 16, 16)).shape == (4, 5)
    has_batch_norm = any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    has_group_norm = any(isinstance(m, nn.GroupNorm) for m in model.modules())
    assert (has_batch_norm, has_group_norm) == (norm == "batch", norm == "group")


def test_group_norm_makes_samples_independent():
    # With GroupNorm a sample's logits do not depend on the rest of the batch; with BatchNorm
    # in training mode they do, which is why accumulation with BatchNorm is not exact.
    x = torch.randn(4, 3, 8, 8)
    group = SmallCNN(norm="group")
    torch.testing.assert_close(group(x)[:2], group(x[:2]))
    batch = SmallCNN(norm="batch")
    assert not torch.allclose(batch(x)[:2], batch(x[:2]))


def test_small_cnn_rejects_bad_input():
    model = SmallCNN(in_channels=3)
    with pytest.raises(ValueError, match=r"\[batch, 3, height, width\], got \[3, 8, 8\]"):
        model(torch.randn(3, 8, 8))
    with pytest.raises(ValueError, match=r"got \[2, 1, 8, 8\]"):
        model(torch.randn(2, 1, 8, 8))
    with pytest.raises(ValueError, match="norm must be one of"):
        SmallCNN(norm="layer")


def test_tiny_lm_shapes():
    model = TinyLM(13, d_model=16, n_heads=2, n_layers=1, max_length=10)
    logits = model(torch.randint(0, 13, (3, 10)))
    assert logits.shape == (3, 10, 13) and logits.dtype == torch.float32


def test_tiny_lm_is_causal():
    model = TinyLM(13, max_length=12)
    tokens = torch.randint(1, 13, (2, 12))
    logits = model(tokens)
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 13
    changed_logits = model(changed)
    torch.testing.assert_close(changed_logits[:, :6], logits[:, :6])
    assert not torch.allclose(changed_logits[:, 6:], logits[:, 6:])


def test_tiny_lm_right_padding_keeps_real_logits():
    model = TinyLM(13, max_length=16)
    tokens = torch.randint(1, 13, (1, 5))
    padded = torch.cat([tokens, torch.zeros(1, 9, dtype=torch.long)], 1)
    torch.testing.assert_close(model(padded)[:, :5], model(tokens), rtol=1e-5, atol=1e-6)


def test_tiny_lm_rejects_bad_input():
    model = TinyLM(13, max_length=8)
    with pytest.raises(ValueError, match="sequence length 9 exceeds max_length=8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(TypeError, match="integer token ids"):
        model(torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"shape \[batch, time\]"):
        model(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 13\)"):
        model(torch.tensor([[1, 13]]))
    with pytest.raises(ValueError, match="divisible by n_heads"):
        TinyLM(13, d_model=10, n_heads=3)


def test_count_parameters():
    assert count_parameters(nn.Linear(3, 2)) == 8
    model = MLP(4, 8, 2, depth=1)
    assert count_parameters(model) == (4 * 8 + 8) + (8 * 2 + 2)
    model.layers[0].requires_grad_(False)
    assert count_parameters(model, trainable_only=True) == 8 * 2 + 2
    with pytest.raises(TypeError, match="torch.nn.Module"):
        count_parameters([torch.ones(2)])


def test_residual_mlp_blocks_and_shapes():
    from helpers.models import ResidualMLP

    model = ResidualMLP(8, 16, depth=3, seed=1)
    assert len(model.blocks) == 3
    assert model(torch.randn(4, 8)).shape == (4, 8)
    same = ResidualMLP(8, 16, depth=3, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), same.parameters(), strict=True))
    with pytest.raises(ValueError, match=r"shape \[batch, 8\]"):
        model(torch.randn(4, 5))
