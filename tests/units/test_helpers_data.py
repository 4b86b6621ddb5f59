"""Unit tests of helpers.data."""

import pickle

import pytest
import torch
from torch.utils.data import DataLoader

from helpers import data


def test_make_blobs_shapes_dtypes_and_determinism():
    x, y = data.make_blobs(100, 5, 4, seed=3)
    assert x.shape == (100, 5) and x.dtype == torch.float32
    assert y.shape == (100,) and y.dtype == torch.int64
    assert set(y.tolist()) == {0, 1, 2, 3}
    x2, y2 = data.make_blobs(100, 5, 4, seed=3)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    x3, _ = data.make_blobs(100, 5, 4, seed=4)
    assert not torch.equal(x, x3)


def test_make_blobs_ignores_global_rng():
    torch.manual_seed(0)
    first = data.make_blobs(10, 2, 2)
    torch.manual_seed(99)
    second = data.make_blobs(10, 2, 2)
    assert torch.equal(first[0], second[0])


def test_make_blobs_is_learnable_by_nearest_centre():
    x, y = data.make_blobs(400, 8, 4)
    centres = torch.stack([x[y == k].mean(0) for k in range(4)])
    predicted = torch.cdist(x, centres).argmin(1)
    assert (predicted == y).float().mean() > 0.9


@pytest.mark.parametrize(("args", "match"), [
    ((0, 5, 2), "num_samples must be positive"),
    ((10, -1, 2), "num_features must be positive"),
    ((10, 5, 0), "num_classes must be positive"),
])
def test_make_blobs_rejects_bad_sizes(args, match):
    with pytest.raises(ValueError, match=match):
        data.make_blobs(*args)


def test_make_blobs_rejects_non_int_seed():
    with pytest.raises(TypeError, match="seed must be an int"):
        data.make_blobs(4, 2, 2, seed="a")


def test_make_images():
    x, y = data.make_images(40, channels=2, size=8, num_classes=4, seed=2)
    assert x.shape == (40, 2, 8, 8) and x.dtype == torch.float32
    assert y.shape == (40,) and y.dtype == torch.int64 and y.max() < 4
    assert torch.equal(x, data.make_images(40, channels=2, size=8, num_classes=4, seed=2)[0])
    with pytest.raises(ValueError, match="size must be at least 4"):
        data.make_images(4, size=2)


def test_make_images_classes_differ_in_spectrum():
    x, y = data.make_images(200, channels=1, size=16, num_classes=2, seed=0)
    # Class 0's stripes are vertical, class 1's horizontal: the energy of row-wise vs column-wise
    # differences separates them, which a conv net can learn.
    along_rows = (x[:, 0, :, 1:] - x[:, 0, :, :-1]).square().mean((1, 2))
    along_cols = (x[:, 0, 1:, :] - x[:, 0, :-1, :]).square().mean((1, 2))
    predicted = (along_cols > along_rows).long()
    assert (predicted == y).float().mean() > 0.9


def test_make_token_sequences():
    sequences = data.make_token_sequences(50, vocab_size=20, min_length=3, max_length=9, seed=5)
    assert len(sequences) == 50
    lengths = {len(s) for s in sequences}
    assert min(lengths) >= 3 and max(lengths) <= 9 and len(lengths) > 3
    for s in sequences:
        assert s.dim() == 1 and s.dtype == torch.int64
        assert s.min() >= 1 and s.max() < 20
    again = data.make_token_sequences(50, vocab_size=20, min_length=3, max_length=9, seed=5)
    assert all(torch.equal(a, b) for a, b in zip(sequences, again, strict=True))


def test_make_token_sequences_follow_a_pattern():
    sequences = data.make_token_sequences(200, 50, 8, 8, noise=0.0)
    for s in sequences:
        steps = ((s[1:] - s[:-1]) % 49).unique()
        assert len(steps) == 1 and steps.item() in (1, 2, 3)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    (dict(vocab_size=1), ValueError, "vocab_size must be at least 2"),
    (dict(min_length=5, max_length=4), ValueError, "must not exceed max_length"),
    (dict(min_length=0), ValueError, "min_length must be positive"),
    (dict(noise=1.5), ValueError, "noise must be a probability"),
])
def test_make_token_sequences_rejects_bad_input(kwargs, error, match):
    arguments = dict(num_sequences=3, vocab_size=10, min_length=2, max_length=4) | kwargs
    with pytest.raises(error, match=match):
        data.make_token_sequences(**arguments)


def test_lm_batch_pads_and_shifts():
    sequences = [torch.tensor([5, 6, 7, 8]), torch.tensor([3, 4])]
    inputs, targets = data.lm_batch(sequences)
    assert inputs.dtype == targets.dtype == torch.int64
    # Each row is its padded sequence minus the last column; a target exists for real tokens only.
    assert inputs.tolist() == [[5, 6, 7], [3, 4, 0]]
    assert targets.tolist() == [[6, 7, 8], [4, -100, -100]]
    inputs, targets = data.lm_batch(sequences, pad_id=9, ignore_index=-1)
    assert inputs.tolist() == [[5, 6, 7], [3, 4, 9]]
    assert targets.tolist() == [[6, 7, 8], [4, -1, -1]]


def test_lm_batch_rejects_bad_input():
    with pytest.raises(ValueError, match="sequences is empty"):
        data.lm_batch([])
    with pytest.raises(ValueError, match="sequence 1 has 1 token"):
        data.lm_batch([torch.tensor([1, 2]), torch.tensor([3])])
    with pytest.raises(ValueError, match="sequence 0 must be 1-D"):
        data.lm_batch([torch.ones(2, 3, dtype=torch.long)])
    with pytest.raises(TypeError, match="integer token ids"):
        data.lm_batch([torch.ones(3)])
    with pytest.raises(TypeError, match="list of 1-D integer tensors"):
        data.lm_batch(torch.ones(2, 3, dtype=torch.long))


def test_count_target_tokens():
    targets = torch.tensor([[1, 2, -100], [3, -100, -100]])
    assert data.count_target_tokens(targets) == 3
    assert data.count_target_tokens(targets, ignore_index=1) == 5
    _, targets = data.lm_batch(data.make_token_sequences(7, 10, 2, 6))
    assert data.count_target_tokens(targets) == (targets != -100).sum().item()
    with pytest.raises(TypeError, match="integer class ids"):
        data.count_target_tokens(torch.ones(3))


def test_split_micro_batches():
    x, y = torch.arange(10.0).reshape(5, 2), torch.arange(5)
    pieces = data.split_micro_batches(x, y, 2)
    assert [len(px) for px, _ in pieces] == [2, 2, 1]
    assert torch.equal(torch.cat([px for px, _ in pieces]), x)
    assert torch.equal(torch.cat([py for _, py in pieces]), y)
    assert len(data.split_micro_batches(x, y, 10)) == 1


@pytest.mark.parametrize(("x", "y", "size", "error", "match"), [
    (torch.ones(4, 2), torch.ones(3), 2, ValueError, "same size along dim 0, got 4 and 3"),
    (torch.ones(4, 2), torch.ones(4), 0, ValueError, "micro_batch_size must be positive"),
    (torch.ones(0, 2), torch.ones(0), 2, ValueError, "x is empty"),
    (torch.ones(4, 2), torch.ones(4), 1.5, TypeError, "micro_batch_size must be an int"),
])
def test_split_micro_batches_rejects_bad_input(x, y, size, error, match):
    with pytest.raises(error, match=match):
        data.split_micro_batches(x, y, size)


def test_split_by_sizes():
    x, y = torch.arange(6.0)[:, None], torch.arange(6)
    pieces = data.split_by_sizes(x, y, [1, 3, 2])
    assert [py.tolist() for _, py in pieces] == [[0], [1, 2, 3], [4, 5]]
    with pytest.raises(ValueError, match="sizes add up to 5 but x has 6"):
        data.split_by_sizes(x, y, [2, 3])
    with pytest.raises(ValueError, match="every size must be positive"):
        data.split_by_sizes(x, y, [6, 0])
    with pytest.raises(ValueError, match="non-empty list"):
        data.split_by_sizes(x, y, [])


def test_slow_dataset_items():
    dataset = data.SlowDataset(12, 4, num_classes=3, delay_s=0.0, seed=1)
    assert len(dataset) == 12
    x, y = dataset[5]
    assert x.shape == (4,) and x.dtype == torch.float32
    assert y.shape == () and y.dtype == torch.int64
    blobs_x, blobs_y = data.make_blobs(12, 4, 3, seed=1)
    assert torch.equal(x, blobs_x[5]) and y == blobs_y[5]
    with pytest.raises(IndexError, match="out of range"):
        dataset[12]
    with pytest.raises(ValueError, match="delay_s must be >= 0"):
        data.SlowDataset(4, 2, delay_s=-1)


def test_slow_dataset_pickles_and_loads_with_workers():
    dataset = data.SlowDataset(8, 3, num_classes=2, delay_s=0.001)
    clone = pickle.loads(pickle.dumps(dataset))
    assert torch.equal(clone[3][0], dataset[3][0])
    loader = DataLoader(dataset, batch_size=4, num_workers=2)
    batches = list(loader)
    assert [bx.shape for bx, _ in batches] == [(4, 3), (4, 3)]
    assert torch.equal(torch.cat([by for _, by in batches]), dataset.labels)


@pytest.mark.parametrize(("value", "error"), [(0, ValueError), (-3, ValueError), (2.0, TypeError),
                                              (True, TypeError), ("4", TypeError)])
def test_positive_int_names_the_argument(value, error):
    from helpers.validate import positive_int

    with pytest.raises(error, match="micro_batch_size must be"):
        positive_int(value, "micro_batch_size")
    assert positive_int(7, "micro_batch_size") == 7
