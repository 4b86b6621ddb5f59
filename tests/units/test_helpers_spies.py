"""Unit tests of helpers.spies, helpers.loader_spies and helpers.host_syncs."""

import copy
import warnings

import pytest
import torch
from torch import nn

from helpers.data import make_blobs, split_micro_batches
from helpers.grads import grad_snapshot
from helpers.models import MLP
from helpers.spies import Call, CallLog, record


@pytest.fixture
def setup():
    x, y = make_blobs(8, 4, 3)
    model = MLP(4, 8, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, optimizer, x, y


def _loss(model, x, y):
    return nn.functional.cross_entropy(model(x), y)


def test_call_log_summary_and_queries():
    log = CallLog()
    assert log.summary() == "(no calls)" and len(log) == 0
    for name in ["zero_grad", "backward", "backward", "step", "zero_grad", "backward"]:
        log._add(name)
    assert log.summary() == "zero_grad, backward x2, step, zero_grad, backward"
    assert log.count("backward") == 3 and len(log) == 6
    assert [call.index for call in log.of("zero_grad")] == [0, 4]
    assert log.names()[3] == "step" and isinstance(log.calls[0], Call)
    with pytest.raises(ValueError, match="unknown call name 'stpe'"):
        log.count("stpe")


def test_records_accumulation_loop(setup):
    model, optimizer, x, y = setup
    micro_batches = split_micro_batches(x, y, 2)
    with record(model=model, optimizer=optimizer) as log:
        for cycle in (micro_batches[:2], micro_batches[2:]):
            optimizer.zero_grad(set_to_none=True)
            for mx, my in cycle:
                _loss(model, mx, my).backward()
            expected_grads = grad_snapshot(model)
            optimizer.step()
    assert log.summary() == "zero_grad, backward x2, step, zero_grad, backward x2, step"
    assert log.of("zero_grad")[0].info["set_to_none"] is True
    last_step = log.of("step")[-1]
    assert list(last_step.info["grads"]) == [name for name, _ in model.named_parameters()]
    assert all(torch.equal(last_step.info["grads"][k], v) for k, v in expected_grads.items())


def test_without_model_grads_are_keyed_by_position(setup):
    model, optimizer, x, y = setup
    with record(optimizer=optimizer, patch_clip=False) as log:
        optimizer.zero_grad(set_to_none=False)
        _loss(model, x, y).backward()
        optimizer.step()
    assert log.summary() == "zero_grad, step"
    assert log.of("zero_grad")[0].info["set_to_none"] is False
    assert list(log.of("step")[0].info["grads"]) == ["p0", "p1", "p2", "p3", "p4", "p5"]


def test_one_backward_per_pass_with_reused_parameters():
    layer = nn.Linear(3, 3)
    with record(model=layer) as log:
        layer(layer(layer(torch.randn(2, 3)))).sum().backward()
        layer(torch.randn(2, 3)).sum().backward()
    assert log.summary() == "backward x2"


def test_model_zero_grad_is_recorded(setup):
    model, _, x, y = setup
    with record(model=model) as log:
        model.zero_grad()
    assert log.of("zero_grad")[0].info == {"set_to_none": True, "source": "model"}


def test_deep_copy_inside_context_is_not_spied(setup):
    model, optimizer, x, y = setup
    _loss(model, x, y).backward()
    with record(model=model, optimizer=optimizer) as log:
        twin = copy.deepcopy(model)
        twin.zero_grad()
        _loss(twin, x, y).backward()
    assert len(log) == 0
    assert all(p.grad is not None for p in model.parameters())


def test_grad_scaler_skips_step_on_inf(setup):
    model, optimizer, x, y = setup
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with record(model=model, optimizer=optimizer, scaler=scaler) as log:
        for inject_inf in (False, True):
            optimizer.zero_grad()
            scaler.scale(_loss(model, x, y)).backward()
            if inject_inf:
                next(model.parameters()).grad[0, 0] = float("inf")
            scaler.step(optimizer)
            scaler.update()
    assert log.summary() == (
        "zero_grad, scale, backward, scaler_step, step, update, "
        "zero_grad, scale, backward, scaler_step, update"
    )
    assert [c.info["scale"] for c in log.of("scale")] == [1024.0, 1024.0]
    assert [c.info["optimizer_stepped"] for c in log.of("scaler_step")] == [True, False]
    skipped_update = log.of("update")[1].info
    assert skipped_update["scale_after"] == skipped_update["scale_before"] / 2 == 512.0


def test_clip_records_norm_before_clipping(setup):
    model, optimizer, x, y = setup
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with record(model=model, optimizer=optimizer, scaler=scaler) as log:
        scaler.scale(_loss(model, x, y)).backward()
        scaled_norm = torch.linalg.vector_norm(
            torch.stack([p.grad.norm() for p in model.parameters()])
        ).item()
        torch.nn.utils.clip_grad.clip_grad_norm_(model.parameters(), max_norm=1e9)
        scaler.unscale_(optimizer)
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
        scaler.step(optimizer)
        scaler.update()
    assert log.summary() == "scale, backward, clip, unscale_, clip, scaler_step, step, update"
    first, second = log.of("clip")
    assert first.info["norm_seen"] == pytest.approx(scaled_norm, rel=1e-5)
    assert second.info == {"norm_seen": pytest.approx(total.item()), "max_norm": 0.01,
                           "norm_type": 2.0}
    assert second.info["norm_seen"] == pytest.approx(scaled_norm / 1024, rel=1e-5)


def test_clip_is_seen_however_it_was_imported(setup):
    model, optimizer, x, y = setup
    bound_before = torch.nn.utils.clip_grad_norm_      # `from torch.nn.utils import clip_grad_norm_`
    with record(model=model, optimizer=optimizer) as log:
        _loss(model, x, y).backward()
        total = bound_before(model.parameters(), 0.01)
        optimizer.step()
    assert log.summary() == "backward, clip, step"
    assert log.of("clip")[0].info["norm_seen"] == pytest.approx(total.item())
    assert torch.nn.utils.clip_grad_norm_ is bound_before, "the spy must put the function back"


def test_two_step_clip_is_recorded_once(setup):
    model, optimizer, x, y = setup
    with record(model=model, optimizer=optimizer) as log:
        _loss(model, x, y).backward()
        grads = [p.grad for p in model.parameters()]
        total = torch.nn.utils.get_total_norm(grads)
        torch.nn.utils.clip_grads_with_norm_(model.parameters(), 0.01, total)
        optimizer.step()
    assert log.summary() == "backward, clip, step"
    assert log.of("clip")[0].info == {"norm_seen": pytest.approx(total.item()), "max_norm": 0.01,
                                      "norm_type": None}
    clipped = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert clipped.item() == pytest.approx(0.01, rel=1e-3)


def test_scheduler_step_is_recorded_without_warnings(setup):
    model, optimizer, x, y = setup
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with record(optimizer=optimizer, scheduler=scheduler) as log:
            _loss(model, x, y).backward()
            optimizer.step()
            scheduler.step()
            late_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 1.0)
            optimizer.step()
            late_scheduler.step()
    assert log.summary() == "step, scheduler_step, step"
    assert log.of("scheduler_step")[0].info["last_lr"] == [pytest.approx(0.05)]


def test_everything_is_restored_even_after_an_error(setup):
    model, optimizer, x, y = setup
    scaler = torch.amp.GradScaler("cpu")
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    scheduler_step = vars(optimizer)["step"]
    clip_functions = (torch.nn.utils.clip_grad_norm_, torch.nn.utils.clip_grad.clip_grad_norm_)
    with pytest.raises(RuntimeError, match="boom"):
        with record(model=model, optimizer=optimizer, scaler=scaler, scheduler=scheduler) as log:
            raise RuntimeError("boom")
    assert vars(optimizer)["step"] is scheduler_step
    assert "zero_grad" not in vars(optimizer) and "zero_grad" not in vars(model)
    for name in ("scale", "unscale_", "step", "update"):
        assert name not in vars(scaler)
    assert "step" not in vars(scheduler)
    assert (torch.nn.utils.clip_grad_norm_, torch.nn.utils.clip_grad.clip_grad_norm_) == (
        clip_functions
    )
    _loss(model, x, y).backward()
    optimizer.step()
    assert len(log) == 0


def test_plain_optimizer_step_is_the_original_again(setup):
    model, optimizer, x, y = setup
    with record(optimizer=optimizer):
        assert "step" in vars(optimizer)
    assert "step" not in vars(optimizer)
    assert optimizer.step.__func__ is type(optimizer).step


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(model="model"), "model must be a torch.nn.Module"),
    (dict(optimizer=object()), "optimizer must be a torch.optim.Optimizer"),
    (dict(scaler=1.0), "scaler must be a torch.amp.GradScaler"),
    (dict(scheduler=[]), "scheduler must be a torch.optim.lr_scheduler.LRScheduler"),
])
def test_record_rejects_wrong_types(kwargs, match):
    with pytest.raises(TypeError, match=match):
        with record(**kwargs):
            pass


def test_record_rejects_frozen_model():
    frozen = nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(ValueError, match="no parameter that requires grad"):
        with record(model=frozen):
            pass


def test_record_loaders_sees_settings_and_waits():
    from torch.utils.data import DataLoader, TensorDataset

    from helpers.loader_spies import record_loaders

    dataset = TensorDataset(torch.arange(10.0), torch.arange(10))
    ticks = iter(range(100))
    with record_loaders(clock=lambda: float(next(ticks))) as log:
        batches = list(DataLoader(dataset, batch_size=4, num_workers=0))
    assert len(batches) == 3
    assert log.settings == [{"num_workers": 0, "pin_memory": False, "persistent_workers": False,
                             "prefetch_factor": None, "batch_size": 4, "shuffle": False,
                             "drop_last": False}]
    # Three batches and the final StopIteration, one fake second each.
    assert log.batches == 3 and log.wait_s == 4.0
    assert DataLoader.__init__.__qualname__ == "DataLoader.__init__"


def test_record_host_syncs_counts_and_restores():
    from helpers.host_syncs import record_host_syncs

    t = torch.tensor([1.5, 2.0])
    with record_host_syncs() as syncs:
        t[0].item()
        float(t[1])
        t.tolist()
        if t[0] > 1:
            t[0].cpu()                     # a 0-dim read, like logging a loss
    assert syncs.counts == {"item": 1, "float": 1, "int": 0, "tolist": 1, "cpu": 1, "bool": 1, "numpy": 0,
                            "to": 0, "print": 0, "format": 0}
    assert syncs.total == 5
    with record_host_syncs() as fresh:
        pass
    assert fresh.total == 0 and t[0].item() == 1.5


def test_record_host_syncs_sees_methods_bound_before_it_began():
    from helpers.host_syncs import record_host_syncs

    # A student who keeps references to torch's methods from before the recording still reads
    # through torch's dispatch, where the count is made.
    item, to_int = torch.Tensor.item, torch.Tensor.__int__
    loss = torch.tensor(2.5)
    with record_host_syncs() as syncs:
        item(loss)
        to_int(loss)
        print(loss)
    assert syncs.counts["item"] == 1 and syncs.counts["int"] == 1 and syncs.counts["print"] == 1
    assert syncs.total == 3


def test_record_host_syncs_ignores_torch_internals():
    from torch.utils.data import DataLoader, TensorDataset

    from helpers.host_syncs import record_host_syncs

    dataset = TensorDataset(torch.arange(8.0))
    with record_host_syncs() as syncs:
        # Starting workers seeds them with a host tensor's .item(), inside torch.
        batches = list(DataLoader(dataset, batch_size=4, num_workers=1))
    assert len(batches) == 2 and syncs.total == 0


def test_record_host_syncs_sees_formatting_copies_and_graphs():
    from helpers.host_syncs import record_host_syncs

    weight = torch.ones(2, requires_grad=True)
    total = (weight * 2).sum()
    with record_host_syncs() as syncs:
        f"{total:.2f}"                    # Tensor.__format__ reads the value through .item()
        total.detach().to("cpu")
        total.detach().to(torch.float64)  # a dtype change is no host copy
        total.item()                      # a running total that still carries its graph
    assert syncs.counts["format"] == 1 and syncs.counts["item"] == 1 and syncs.counts["to"] == 1
    assert syncs.reads_with_graph == 2    # the formatted total and the .item() both carry its graph


def test_record_loaders_keeps_per_batch_waits():
    from torch.utils.data import DataLoader, TensorDataset

    from helpers.loader_spies import record_loaders

    ticks = iter(range(100))
    with record_loaders(clock=lambda: float(next(ticks))) as log:
        list(DataLoader(TensorDataset(torch.arange(10.0)), batch_size=4))
    assert log.waits_s == [1.0, 1.0, 1.0] and log.steady_wait_s() == 2.0


def test_record_loaders_reads_the_settings_when_iteration_starts():
    """A setting changed after the loader was built counts as it takes effect, not as it was built."""
    from torch.utils.data import DataLoader, TensorDataset

    from helpers.loader_spies import record_loaders

    dataset = TensorDataset(torch.arange(8.0))
    with record_loaders() as log:
        loader = DataLoader(dataset, batch_size=4, num_workers=2)
        loader.num_workers = 0
        loader.pin_memory = True
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # pinning without an accelerator: a warning, no pin
            batches = list(loader)
        DataLoader(dataset, batch_size=4, num_workers=2)     # never iterated: never in effect
    assert len(batches) == 2
    assert [(s["num_workers"], s["pin_memory"]) for s in log.settings] == [(0, True)]


def test_record_host_syncs_counts_reads_on_threads_started_meanwhile():
    import threading

    from helpers.host_syncs import record_host_syncs

    loss = torch.tensor(2.0)
    with record_host_syncs() as log:
        worker = threading.Thread(target=lambda: [loss.item() for _ in range(3)])
        worker.start()
        worker.join()
        loss.item()
    assert log.counts["item"] == 4
    after = threading.Thread(target=loss.item)      # the recording is over: no mode is entered
    after.start()
    after.join()
    assert log.counts["item"] == 4


def test_record_loaders_sees_shuffle_and_drop_last():
    """shuffle=True makes the loader's sampler a RandomSampler; a batch sampler's own sampler and
    drop_last count as the loader's."""
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler, TensorDataset

    from helpers.loader_spies import record_loaders

    dataset = TensorDataset(torch.arange(10.0))
    with record_loaders() as log:
        list(DataLoader(dataset, batch_size=4, shuffle=True))
        list(DataLoader(dataset, batch_size=4, drop_last=True))
        list(DataLoader(dataset, batch_sampler=BatchSampler(RandomSampler(dataset), 4, drop_last=True)))
        list(DataLoader(dataset, batch_sampler=BatchSampler(SequentialSampler(dataset), 4, drop_last=False)))
    assert [(s["shuffle"], s["drop_last"]) for s in log.settings] == [
        (True, False), (False, True), (True, True), (False, False)]


def test_record_host_syncs_counts_batch_copies_and_the_blocking_ones():
    """.to(device, ...) of a host batch (one or more dimensions) is a batch copy, blocking unless
    non_blocking=True, given by keyword or as to(device, dtype, non_blocking)'s first bool."""
    from helpers.host_syncs import record_host_syncs

    batch, loss = torch.ones(4, 3), torch.tensor(2.0)
    with record_host_syncs() as syncs:
        batch.to("cpu", non_blocking=True)
        batch.to(device=torch.device("cpu"), non_blocking=True)
        batch.to(torch.device("cpu"), torch.float64, True)
        batch.to("cpu")                                  # blocking
        batch.to(torch.device("cpu"), non_blocking=False)  # blocking
        batch.to(torch.float64)                          # a dtype change: no copy to a device
        loss.to("cpu")                                   # a 0-dim read: a host sync, no batch
    assert syncs.batch_copies == 5 and syncs.blocking_batch_copies == 2
    assert syncs.counts["to"] == 1 and syncs.total == 1
    # torch's own moves (Module.to) are not the code under test's.
    with record_host_syncs() as fresh:
        torch.nn.Linear(3, 2).to("cpu")
    assert fresh.batch_copies == 0


def test_the_lessons_reach_the_loader_and_host_sync_spies_through_spies():
    from helpers import host_syncs, loader_spies, spies

    assert spies.record_loaders is loader_spies.record_loaders
    assert spies.LoaderLog is loader_spies.LoaderLog
    assert spies.record_host_syncs is host_syncs.record_host_syncs
    assert spies.SyncLog is host_syncs.SyncLog
