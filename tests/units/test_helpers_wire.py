"""helpers.transport.wire and .remote: what crosses between a check and the student's code."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from helpers import models
from helpers.transport import remote, wire


def round_trip(value, objects=False):
    return wire.decode(*wire.encode(value, objects=objects), objects=objects)


def test_plain_values_come_back_as_exact_builtin_types():
    class AlwaysEqual(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    value = {"a": [1, 2.5, True, None, "s"], "b": (np.int64(7), np.float32(0.5)), "c": AlwaysEqual(3),
             "d": float("nan"), "e": torch.float16}
    back = round_trip(value)
    assert back["a"] == [1, 2.5, True, None, "s"] and back["b"] == (7, 0.5) and back["e"] is torch.float16
    assert type(back["c"]) is int and back["c"] != 4 and math.isnan(back["d"])


def test_tensors_keep_dtype_shape_and_values_but_lose_their_subclass():
    class Faker(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is torch.allclose:
                return True
            return super().__torch_function__(func, types, args, kwargs or {})

    # A 0-dim tensor is what a student who forgot .item() returns as a loss.
    tensors = (torch.randn(3, 4), torch.randn(2, dtype=torch.bfloat16), torch.arange(5), torch.zeros(0, 3),
               torch.tensor(2.5), torch.tensor(7, dtype=torch.int16))
    for tensor in tensors:
        back = round_trip(tensor)
        assert back.dtype == tensor.dtype and back.shape == tensor.shape and torch.equal(back, tensor)
    faked = round_trip(torch.zeros(3).as_subclass(Faker))
    assert type(faked) is torch.Tensor and not torch.allclose(faked, torch.ones(3))


def test_modules_travel_from_the_grader_with_weights_flags_and_gradients():
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 2)).to(torch.bfloat16)
    model[0].requires_grad_(False)
    model[3].weight.grad = torch.ones_like(model[3].weight)
    residual = models.ResidualMLP(6, 12, depth=2, seed=3)
    x = torch.randn(5, 6, requires_grad=True)
    copy, residual_copy, x_copy = round_trip([model, residual, x], objects=True)
    assert copy[0].weight.dtype == torch.bfloat16 and not copy[0].weight.requires_grad
    assert torch.equal(copy[3].weight.grad, model[3].weight.grad)
    assert torch.equal(residual_copy(x_copy), residual(x)) and x_copy.requires_grad


def test_the_grader_reads_no_objects_from_a_kernel():
    tree, buffers = wire.encode([nn.Linear(2, 2)], objects=True)
    with pytest.raises(wire.WireError):
        wire.decode(tree, buffers)
    with pytest.raises(wire.WireError):
        wire.decode({"t": "callable", "path": "os.system"}, [], objects=True)
    with pytest.raises(wire.WireError):
        wire.decode({"t": "tensor", "buffer": 0, "dtype": "float32", "shape": [4], "requires_grad": False},
                    [b"\0" * 8])
    with pytest.raises(wire.WireError):
        wire.encode(object())


@remote.collector
def collect_doubled(function, values):
    return remote.called(function, values)


def test_a_check_reads_what_the_students_function_returned_or_raised():
    outcome = remote.run_student(lambda t: t * 2, collect_doubled, torch.ones(2))
    assert torch.equal(outcome["value"], torch.full((2,), 2.0))
    outcome = remote.run_student(lambda t: 1 / 0, collect_doubled, torch.ones(2))
    raised = remote.raised_of(outcome)
    assert (raised.type, raised.message) == ("ZeroDivisionError", "division by zero")
    assert "1 / 0" in raised.line       # the student's own line that raised, for the diagnosis

    def stub(values):
        raise NotImplementedError("write your solution here")

    with pytest.raises(NotImplementedError, match="write your solution here"):
        remote.raised_of(remote.run_student(stub, collect_doubled, torch.ones(2)))
    with pytest.raises(AssertionError, match="cannot read"):
        remote.run_student(lambda t: object(), collect_doubled, torch.ones(2))
    with pytest.raises(AssertionError, match="holds a str"):
        remote.run_student("b", collect_doubled, torch.ones(2))


def test_the_student_gets_a_copy_of_the_checks_inputs():
    model = nn.Linear(2, 2)

    def zeroes(values):
        with torch.no_grad():
            values.weight.zero_()

    remote.run_student(zeroes, collect_doubled, model)
    assert model.weight.abs().sum() > 0


def test_a_path_travels_as_its_text():
    from pathlib import Path, PurePosixPath

    class Shifty(PurePosixPath):
        def __eq__(self, other):
            return True

        __hash__ = PurePosixPath.__hash__

    back = round_trip({"trace": Path("/tmp/trace.json"), "other": Shifty("a/b")})
    assert back == {"trace": "/tmp/trace.json", "other": "a/b"} and type(back["other"]) is str


def test_fake_machines_and_slow_datasets_travel_to_the_kernel_whole():
    from helpers import data, fakes

    machine = fakes.FakeMachine([0.5, 0.25], [1.0], first_call_extra_s=2.0, drift_per_call=0.1)
    machine.step_a()
    dataset = data.SlowDataset(6, 3, num_classes=2, delay_s=0.0, seed=1)
    machine_copy, dataset_copy = round_trip([machine, dataset], objects=True)
    machine_copy.step_a()
    machine.step_a()
    assert machine_copy.events == machine.events and machine_copy.now == machine.now
    assert len(dataset_copy) == 6 and all(torch.equal(a, b) for a, b in zip(dataset_copy[4], dataset[4],
                                                                            strict=True))


def test_a_reply_whose_tensors_share_one_buffer_is_refused_before_it_grows():
    """Many tensor nodes naming one 16 MiB buffer once made the grader copy it per node (1 GiB)."""
    import tracemalloc

    node = {"t": "tensor", "buffer": 0, "shape": [4 * 2**20], "dtype": "float32"}
    tree = {"t": "list", "items": [node] * 64}
    buffer = bytes(16 * 2**20)
    tracemalloc.start()
    try:
        with pytest.raises(wire.WireError, match="name the same bytes"):
            wire.decode(tree, [buffer])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 40 * 2**20, f"decoding grew the process by {peak / 2**20:.0f} MiB"


def test_the_tensors_of_one_reply_are_capped_in_all(monkeypatch):
    monkeypatch.setattr(wire, "MAX_DECODED_BYTES", 1000)
    tree, buffers = wire.encode([torch.zeros(100), torch.zeros(100), torch.zeros(100)])
    with pytest.raises(wire.WireError, match="in all"):
        wire.decode(tree, buffers)
    assert len(wire.decode(*wire.encode([torch.zeros(100), torch.zeros(100)]))) == 2


def test_a_decoded_tensor_owns_its_bytes():
    buffer = bytearray(torch.arange(4, dtype=torch.float32).numpy().tobytes())
    tree = {"t": "tensor", "buffer": 0, "shape": [4], "dtype": "float32"}
    tensor = wire.decode(tree, [buffer])
    buffer[:4] = bytes(4)
    assert tensor.tolist() == [0.0, 1.0, 2.0, 3.0]
