"""Unit tests of helpers.memory."""

import gc
import weakref

import pytest
import torch
from support import cuda_branch
from torch import nn
from torch.utils.checkpoint import checkpoint

from helpers.memory import (
    SavedTensorMeter,
    cuda_peak_bytes,
    format_bytes,
    gradient_bytes,
    optimizer_state_bytes,
    parameter_bytes,
    peak_bytes,
    phase_peaks,
    tensor_bytes,
)
from helpers.models import MLP

DIM, BATCH, BLOCKS = 64, 16, 8


class ResidualBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.fc2(nn.functional.gelu(self.fc1(h)))


@pytest.fixture
def blocks():
    torch.manual_seed(0)
    return nn.Sequential(*[ResidualBlock(DIM) for _ in range(BLOCKS)])


def test_tensor_parameter_and_gradient_bytes():
    assert tensor_bytes(torch.zeros(3, 4)) == 48
    assert tensor_bytes(torch.zeros(10, dtype=torch.bfloat16)) == 20
    model = MLP(4, 8, 2, depth=1)
    expected = ((4 * 8 + 8) + (8 * 2 + 2)) * 4
    assert parameter_bytes(model) == expected
    assert gradient_bytes(model) == 0
    model(torch.randn(3, 4)).sum().backward()
    assert gradient_bytes(model) == expected
    with pytest.raises(TypeError, match="expected a tensor"):
        tensor_bytes([1, 2])


def test_optimizer_state_bytes():
    model = MLP(4, 8, 2, depth=1)
    params = parameter_bytes(model)
    adam = torch.optim.Adam(model.parameters())
    assert optimizer_state_bytes(adam) == 0
    model(torch.randn(3, 4)).sum().backward()
    adam.step()
    # exp_avg and exp_avg_sq per parameter, plus a 4-byte step tensor for each of 4 tensors.
    assert optimizer_state_bytes(adam) == 2 * params + 4 * 4
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        optimizer_state_bytes(model)


def test_meter_counts_saved_activations_exactly(blocks):
    x = torch.randn(BATCH, DIM)
    with SavedTensorMeter(blocks) as meter:
        out = blocks(x)
    # Per block: fc1 saves its input (D), GELU its input (4D), fc2 its input (4D); weights free.
    assert meter.bytes == BLOCKS * BATCH * (DIM + 4 * DIM + 4 * DIM) * 4
    assert meter.count == 3 * BLOCKS
    out.sum().backward()


def test_meter_with_checkpointing_keeps_block_inputs_only(blocks):
    x = torch.randn(BATCH, DIM)
    with SavedTensorMeter(blocks) as meter:
        h = x
        for block in blocks:
            h = checkpoint(block, h, use_reentrant=False)
    assert meter.bytes == BLOCKS * BATCH * DIM * 4
    h.sum().backward()
    assert all(p.grad is not None for p in blocks.parameters())


def test_meter_without_model_counts_weights():
    layer = nn.Linear(8, 8, bias=False)
    x = torch.randn(2, 8, requires_grad=True)
    with SavedTensorMeter(layer) as with_model:
        layer(x)
    with SavedTensorMeter() as without_model:
        layer(x)
    assert without_model.bytes == with_model.bytes + 8 * 8 * 4


def test_meter_does_not_keep_graph_alive(blocks):
    with SavedTensorMeter(blocks):
        out = torch.exp(blocks(torch.randn(BATCH, DIM)))
    alive = weakref.ref(out)
    del out
    gc.collect()
    assert alive() is None


def test_meter_results_match_backward():
    layer = nn.Linear(4, 4)
    x = torch.randn(3, 4, requires_grad=True)
    with SavedTensorMeter(layer):
        y = torch.tanh(layer(x)).sum()
    y.backward()
    reference = x.detach().clone().requires_grad_()
    torch.tanh(layer(reference)).sum().backward()
    torch.testing.assert_close(x.grad, reference.grad)


def test_meter_rejects_wrong_model():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        SavedTensorMeter("model")


def test_cuda_peak_bytes_off_cuda_runs_fn():
    calls = []
    assert cuda_peak_bytes(lambda: calls.append(1), "cpu") is None
    assert calls == [1]


def test_cuda_peak_bytes_cuda_path_on_a_cpu_stand_in(monkeypatch):
    # No GPU in CI: torch.cuda's allocator calls are replaced by a log, so the CUDA branch runs
    # here in the order a GPU would see it (sync, reset the peak, run, sync, read the peak).
    import helpers.memory as memory_module

    events = []
    monkeypatch.setattr(memory_module, "synchronize", lambda device: events.append(f"sync {device}"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: events.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: events.append("read") or 12345)
    assert cuda_peak_bytes(lambda: events.append("fn"), "cuda") == 12345
    assert events == ["sync cuda", "reset", "fn", "sync cuda", "read"]


def test_peak_bytes_on_cpu_is_the_most_held_at_once_not_the_sum():
    def two_at_a_time():
        first = torch.empty(1000)                # 4000 bytes
        second = torch.empty(500)                # 2000 bytes: 6000 held
        del first
        third = torch.empty(750)                 # 3000 bytes: 5000 held
        return second, third

    assert peak_bytes(two_at_a_time, "cpu") == 6000
    assert peak_bytes(lambda: None, "cpu") == 0


def test_peak_bytes_ignores_tensors_older_than_the_window(capfd):
    made_outside = torch.empty(10_000)
    made_in_an_earlier_window = []
    peak_bytes(lambda: made_in_an_earlier_window.append(torch.empty(20_000)), "cpu")

    def frees_old_tensors_then_allocates():
        made_outside.resize_(0)                  # freed here, allocated before any window
        made_in_an_earlier_window.clear()        # freed here, allocated in an earlier window
        return torch.empty(1000)

    # Neither free lowers the total below what the function itself held: 4000 bytes.
    assert peak_bytes(frees_old_tensors_then_allocates, "cpu") == 4000
    # The allocator's native note about the older tensor never reaches the notebook's stderr.
    assert "unknown size" not in capfd.readouterr().err


def test_peak_bytes_sees_the_recompute_that_the_meter_does_not(blocks):
    """Checkpointing every block saves only the inputs, but backward rebuilds one block's insides:
    the peak over forward and backward is well above what the forward saved."""
    x = torch.randn(BATCH, DIM)

    def checkpointed():
        h = x
        for block in blocks:
            h = checkpoint(block, h, use_reentrant=False)
        h.sum().backward()

    with SavedTensorMeter(blocks) as meter:
        peak = peak_bytes(checkpointed, "cpu")
    one_block_inside = BATCH * (4 * DIM) * 4 * 2          # fc1's output and GELU's, float32
    assert meter.bytes == BLOCKS * BATCH * DIM * 4
    assert peak > meter.bytes + one_block_inside


def test_peak_bytes_cuda_path_on_a_cpu_stand_in(monkeypatch):
    import helpers.memory as memory_module

    events = []
    monkeypatch.setattr(memory_module, "synchronize", lambda device: events.append("sync"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: events.append("reset"))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: events.append("now") or 1000)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: events.append("peak") or 5000)
    assert peak_bytes(lambda: events.append("fn"), "cuda") == 4000      # above what was there before
    assert events == ["sync", "now", "reset", "fn", "sync", "peak"]


def test_phase_peaks_carry_what_one_phase_leaves_into_the_next():
    held = {}

    def swap():
        del held["a"]                                                      # 4000 freed
        held["c"] = torch.empty(250)                                       # 1000 made: 3000

    peaks = phase_peaks({
        "make": lambda: held.update(a=torch.empty(1000)),                 # 4000 bytes, kept
        "add": lambda: held.update(b=torch.empty(500)),                   # 2000 more: 6000
        "swap": swap,
    }, "cpu")
    assert peaks == {"make": 4000, "add": 6000, "swap": 6000}
    with pytest.raises(TypeError, match="non-empty dict"):
        phase_peaks({}, "cpu")
    with pytest.raises(TypeError, match="phase 'x' must be a callable"):
        phase_peaks({"x": 3}, "cpu")


def test_peak_bytes_refuses_what_it_cannot_measure():
    with pytest.raises(ValueError, match="measure a copy of the model on the CPU"):
        peak_bytes(lambda: None, "meta")
    with pytest.raises(TypeError, match="callable"):
        peak_bytes(42, "cpu")


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"), (512, "512 B"), (1536, "1.50 KiB"), (9 * 2**20, "9.00 MiB"),
    (2 * 2**30, "2.00 GiB"), (-1536, "-1.50 KiB"),
])
def test_format_bytes(n, text):
    assert format_bytes(n) == text


def test_format_bytes_rejects_non_numbers():
    with pytest.raises(TypeError, match="number of bytes"):
        format_bytes("12")


def test_memory_history_cell_runs_on_a_cpu_stand_in(monkeypatch, tmp_path):
    # Lesson 04's CUDA-only cell (allocator statistics per phase, a memory snapshot) on a CPU:
    # torch.cuda's allocator calls are stand-ins, the model and the plot are real, so a renamed
    # API or a wrong name in the branch fails here and not on a student's first GPU run.
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers import device as dev
    from helpers import plots, report
    from helpers.models import ResidualMLP

    calls = []
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history",
                        lambda **kw: calls.append(("history", kw)))
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", lambda path: Path(path).write_bytes(b"snapshot"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 3 * 2**20)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 2**20)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 4 * 2**20)
    monkeypatch.setattr(plt, "show", lambda: None)
    figures = tmp_path / "figures.jsonl"
    monkeypatch.setenv(report.FIGURES_ENV, str(figures))
    model = ResidualMLP(16, 32, 2, seed=1)
    namespace = {"torch": torch, "dev": dev, "plots": plots, "plt": plt, "report": report, "model": model,
                 "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3), "x": torch.randn(4, 16),
                 "device": torch.device("cpu"), "SNAPSHOT_DIR": tmp_path}
    exec(compile(cuda_branch("04_memory", "cell-011"), "cell-011 (CUDA branch)", "exec"), namespace)
    assert calls.count("reset") == 4 and calls[0][0] == "history"
    assert calls[-1] == ("history", {"enabled": None})
    assert (tmp_path / "one_step.pickle").read_bytes() == b"snapshot"
    assert figures.read_text().count("peak during") == 4
    plt.close("all")


def test_accumulation_peak_cell_runs_on_a_cpu_stand_in(monkeypatch, tmp_path, capsys):
    # Lesson 02's CUDA-only cell (the allocator's peak for a full batch against micro-batches) on
    # a CPU: cuda_peak_bytes stands in with a peak that grows with the rows of one backward.


    from helpers import memory, report
    from helpers.models import MLP

    rows_seen = []
    monkeypatch.setattr(torch, "randn", lambda *shape, **kw: rows_seen.append(shape[0]) or torch.ones(*shape))

    def stand_in_peak(fn, device):
        before = len(rows_seen)
        fn()
        return 1000 * rows_seen[before]
    monkeypatch.setattr(memory, "cuda_peak_bytes", stand_in_peak)
    figures = tmp_path / "figures.jsonl"
    monkeypatch.setenv(report.FIGURES_ENV, str(figures))
    namespace = {"torch": torch, "memory": memory, "report": report, "mlp": MLP(8, 16, 3, seed=0),
                 "FEATURES": 8, "MICRO": 4, "effective_sizes": [4, 8], "device": torch.device("cpu")}
    exec(compile(cuda_branch("02_gradient_accumulation", "cell-035"), "cell-035 (CUDA branch)", "exec"),
         namespace)
    assert "effective batch      8: CUDA peak" in capsys.readouterr().out
    assert figures.read_text().count("CUDA peak, effective batch") == 4


def test_meter_keeps_autograds_check_of_in_place_changes():
    """Saved-tensor hooks switch off autograd's own check that a saved tensor was not changed in
    place; the meter checks it instead, so a step between a forward and its backward still raises
    torch's error instead of giving a silently wrong gradient."""
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))   # the second layer saves its weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with SavedTensorMeter(model):
        loss = model(torch.randn(3, 4)).pow(2).sum()
    loss.backward(retain_graph=True)
    optimizer.step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_meter_peak_counts_what_is_alive_at_once():
    """`bytes` adds up every saved storage; `peak` is the most held at one moment: a backward frees
    its graph's saved tensors before the next forward saves new ones."""
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    batches = [torch.randn(8, 4) for _ in range(4)]
    with SavedTensorMeter(model) as one_by_one:
        for x in batches:
            model(x).sum().backward()
    with SavedTensorMeter(model) as all_at_once:
        sum(model(x).sum() for x in batches).backward()
    assert one_by_one.bytes == all_at_once.bytes == 4 * one_by_one.peak
    assert all_at_once.peak == all_at_once.bytes and one_by_one.live == all_at_once.live == 0
