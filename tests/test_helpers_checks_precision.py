"""Unit tests of helpers.checks_precision: the checks of lesson 01 (mixed precision).

The GradScaler call pattern (check_amp_calls) is tested with lesson 02's accumulation loops in
tests/test_helpers_checks_accumulation.py; here its single-step use, the audit, cast_fate and
AMP-step checks, and `running` with lesson 01's error tables.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import checks_precision
from helpers.capture import running
from helpers.checks_precision import clip_grads, first_linear_dtypes
from helpers.data import make_blobs
from helpers.grads import compare, param_snapshot
from helpers.models import MLP
from helpers.spies import record

# The models are tiny: extra intra-op threads only fight each other (3x slower on 2 cores).
pytestmark = pytest.mark.usefixtures("torch_on_one_thread")


# ---------------------------------------------------------------------------------------------
# first_linear_dtypes
# ---------------------------------------------------------------------------------------------

def test_first_linear_dtypes_sees_autocast_and_removes_hook():
    model = MLP(6, 8, 3, seed=44)
    x, _ = make_blobs(4, 6, 3)
    first = model.layers[0]
    with first_linear_dtypes(model) as dtypes:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)
        assert dtypes == [torch.bfloat16]
        model(x)
    assert dtypes == [torch.bfloat16, torch.float32]
    assert not first._forward_hooks
    model(x)
    assert dtypes == [torch.bfloat16, torch.float32]


def test_first_linear_dtypes_removes_hook_on_error():
    model = MLP(6, 8, 3)
    with pytest.raises(RuntimeError, match="boom"), first_linear_dtypes(model):
        raise RuntimeError("boom")
    assert not model.layers[0]._forward_hooks


def test_first_linear_dtypes_needs_a_linear_layer():
    with pytest.raises(ValueError, match="at least one nn.Linear"), \
            first_linear_dtypes(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())):
        pass


# ---------------------------------------------------------------------------------------------
# Lesson 01: running (stderr, errors in the course's words), the audit and AMP-step checks
# ---------------------------------------------------------------------------------------------

def test_running_keeps_stderr_empty_for_a_student_who_warns(capsys):
    import sys
    import warnings

    def chatty_cast_fate(values, dtype):
        warnings.warn("a harmless warning from the student's code", UserWarning, stacklevel=1)
        print("a note on stderr", file=sys.stderr)
        return ["exact"] * len(values)

    with running("cast_fate", checks_precision.CAST_FATE_ERRORS):
        fates = chatty_cast_fate(torch.tensor([1.0, 2.0]), torch.float16)
    assert fates == ["exact", "exact"]
    shown = capsys.readouterr()
    assert shown.err == ""
    assert "a harmless warning from the student's code" in shown.out and "a note on stderr" in shown.out


def test_amp_step_check_passes_a_student_who_warns_without_stderr(capsys):
    import sys
    import warnings

    x, y = make_blobs(32, 6, 3, seed=31)
    model = MLP(6, 8, 3, seed=32)
    reference = checks_precision.amp_reference_step(model, F.cross_entropy, x, y, 0.05, torch.float16, 1024.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with record(model=model, optimizer=optimizer, scaler=scaler) as log, \
            running("amp_train_step", checks_precision.AMP_STEP_ERRORS):
        warnings.warn("the student's own warning", UserWarning, stacklevel=1)
        print("the student's stderr", file=sys.stderr)
        amp_step(model, optimizer, scaler, x, y, 0.05, torch.float16)
    checks_precision.check_amp_calls(log, num_micro_batches=1, num_updates=1)
    checks_precision.check_amp_step_gradient(log.of("step")[0].info["grads"], reference, 0.05)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("raise_it", "phrase"), [
    (lambda: bool(torch.ones(2) == torch.ones(2)), "decide the fate of one value at a time"),
    (lambda: torch.ones(3).item(), "on the whole tensor"),
    (lambda: (1.0).to(torch.float16), "cast the whole tensor first"),
])
def test_running_names_cast_fate_errors(raise_it, phrase):
    with pytest.raises(AssertionError, match=phrase), running("cast_fate", checks_precision.CAST_FATE_ERRORS):
        raise_it()


def test_running_passes_not_implemented_and_unknown_errors_through():
    with pytest.raises(NotImplementedError), running("cast_fate", checks_precision.CAST_FATE_ERRORS):
        raise NotImplementedError()
    with pytest.raises(KeyError), running("cast_fate", checks_precision.CAST_FATE_ERRORS):
        raise KeyError("something else")


def amp_step(model, optimizer, scaler, x, y, max_norm, amp_dtype, *, zero=True, loss_inside=True,
             clip=True, unscale_twice=False, scaled=True):
    """A mixed-precision step, correct by default; each flag makes one classic mistake."""
    if zero:
        optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=amp_dtype):
        output = model(x)
        loss = F.cross_entropy(output, y) if loss_inside else None
    loss = F.cross_entropy(output, y) if loss is None else loss
    (scaler.scale(loss) if scaled else loss).backward()
    scaler.unscale_(optimizer)
    if unscale_twice:
        scaler.unscale_(optimizer)
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


@pytest.mark.parametrize(("mistake", "phrase"), [
    ({}, None),
    ({"zero": False}, "clear old gradients first"),
    ({"loss_inside": False}, "loss computed outside torch.autocast"),
    ({"clip": False}, "was not clipped to max_norm=0.05"),
])
@pytest.mark.parametrize("amp_dtype", [torch.float16, torch.bfloat16])
def test_check_amp_step_gradient_names_the_mistake(mistake, phrase, amp_dtype):
    x, y = make_blobs(32, 6, 3, seed=31)
    model = MLP(6, 8, 3, seed=32)
    reference = checks_precision.amp_reference_step(model, F.cross_entropy, x, y, 0.05, amp_dtype, 1024.0)
    assert param_snapshot(model).keys() == reference.grads.keys()
    assert all(p.grad is None for p in model.parameters()), "the reference must not touch the model"
    for parameter in model.parameters():
        parameter.grad = torch.full_like(parameter, 5.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with record(model=model, optimizer=optimizer, scaler=scaler) as log:
        loss = amp_step(model, optimizer, scaler, x, y, 0.05, amp_dtype, **mistake)
    candidate = log.of("step")[0].info["grads"]
    if phrase is None:
        checks_precision.check_amp_step_gradient(candidate, reference, 0.05, stale=5.0, scale=1024.0)
        assert loss == reference.loss
    else:
        with pytest.raises(AssertionError, match=phrase):
            checks_precision.check_amp_step_gradient(candidate, reference, 0.05, stale=5.0, scale=1024.0)


def test_check_amp_step_gradient_names_gradients_cleared_before_step():
    x, y = make_blobs(32, 6, 3, seed=31)
    model = MLP(6, 8, 3, seed=32)
    reference = checks_precision.amp_reference_step(model, F.cross_entropy, x, y, 0.05, torch.float16, 1024.0)
    with pytest.raises(AssertionError, match="cleared between backward and step"):
        checks_precision.check_amp_step_gradient({n: None for n in reference.grads}, reference, 0.05)


@pytest.mark.parametrize(("mistake", "phrase"), [
    ({"unscale_twice": True}, "ran twice in one step"),
    ({"scaled": False}, "not loss.backward()"),
])
def test_running_names_gradscaler_errors_of_one_step(mistake, phrase):
    x, y = make_blobs(32, 6, 3, seed=31)
    model = MLP(6, 8, 3, seed=32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with pytest.raises(AssertionError, match=phrase), \
            running("amp_train_step", checks_precision.AMP_STEP_ERRORS):
        amp_step(model, optimizer, scaler, x, y, 0.05, torch.float16, **mistake)


def test_reused_leaf_model_records_last_dtype_in_first_place():
    model = checks_precision.replay(checks_precision.ReusedLeafModel(8), torch.randn(3, 8), torch.bfloat16)
    assert list(model.ran) == ["act", "lin"] and model.calls == 1
    assert model.first["act"] == torch.float32 and model.ran["act"] == torch.bfloat16
    checks_precision.check_audit(dict(model.ran), model.ran, "probe", first=model.first)


@pytest.mark.parametrize(("report", "phrase"), [
    ({"act": torch.float32, "lin": torch.bfloat16}, "reports its LAST output's dtype"),
    ({"lin": torch.bfloat16, "act": torch.bfloat16}, "keeps the place of its first run"),
    ({"act": torch.bfloat16, "lin": torch.bfloat16, "unused": None}, "only those that ran"),
    ({"act": torch.float32, "lin": torch.float32}, "inside torch.autocast"),
    ({"act": "torch.bfloat16", "lin": "torch.bfloat16"}, "map each leaf's name to the torch.dtype"),
    ([("act", torch.bfloat16)], "should return a dict"),
])
def test_check_audit_names_the_clause(report, phrase):
    model = checks_precision.replay(checks_precision.ReusedLeafModel(8), torch.randn(3, 8), torch.bfloat16)
    with pytest.raises(AssertionError, match=phrase):
        checks_precision.check_audit(report, model.ran, "probe", first=model.first)


def test_check_audit_left_no_trace():
    model = nn.Sequential(nn.Linear(4, 4))
    before = param_snapshot(model)
    checks_precision.check_audit_left_no_trace(model, before)
    handle = model[0].register_forward_hook(lambda *args: None)
    with pytest.raises(AssertionError, match="remove your forward hooks"):
        checks_precision.check_audit_left_no_trace(model, before)
    handle.remove()
    with torch.no_grad():
        model[0].weight.add_(1.0)
    with pytest.raises(AssertionError, match="the parameters changed"):
        checks_precision.check_audit_left_no_trace(model, before)


def fates_reference(values, dtype):
    cast = values.to(dtype).float()
    normal = torch.finfo(dtype).smallest_normal
    return ["overflow" if c.isinf() else "underflow" if c == 0 else "subnormal" if c.abs() < normal
            else "exact" if c == v else "rounded" for v, c in zip(values, cast, strict=True)]


def test_check_cast_fate_passes_the_reference_and_prints_values_exactly(capsys):
    values = torch.tensor([1.0, 70000.0, 1e-8, 2.0 ** -24, 2.0 ** -14 * (1 - 2.0 ** -12)])
    checks_precision.check_cast_fate(fates_reference, values, fates_reference)
    checks_precision.check_cast_fate(fates_reference, values, fates_reference, unseen=True)

    def exact_before_subnormal(values, dtype):
        return ["exact" if f == "subnormal" and v.to(dtype).float() == v else f
                for v, f in zip(values, fates_reference(values, dtype), strict=True)]

    with pytest.raises(AssertionError, match=r"5.96046448e-08 should be 'subnormal', your function says"):
        checks_precision.check_cast_fate(exact_before_subnormal, values, fates_reference)
    with pytest.raises(AssertionError, match="one string per value"):
        checks_precision.check_cast_fate(lambda values, dtype: "exact", values, fates_reference, unseen=True)


def test_check_autocast_audit_with_a_reference_and_the_reused_leaf_model():
    def audit(model, x, dtype):
        report, handles = {}, []
        for name, module in model.named_modules():
            if not list(module.children()):
                handles.append(module.register_forward_hook(
                    lambda _m, _i, out, name=name: report.__setitem__(name, out.dtype)))
        with torch.no_grad(), torch.autocast(x.device.type, dtype=dtype):
            model(x)
        for handle in handles:
            handle.remove()
        return report

    def replay_sequential(sequential, x, dtype):
        return {name: dtype for name, _ in sequential.named_children()}     # Linear layers only

    x = torch.randn(3, 8)
    assert checks_precision.check_autocast_audit(audit, nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)), x,
                                       torch.bfloat16, "two layers", replay_sequential) == {
        "0": torch.bfloat16, "1": torch.bfloat16}
    reused = checks_precision.ReusedLeafModel(8)
    assert checks_precision.check_autocast_audit(audit, reused, x, torch.float16, "reused") == {
        "act": torch.float16, "lin": torch.float16}

    def audit_twice(model, x, dtype):
        audit(model, x, dtype)
        return audit(model, x, dtype)

    with pytest.raises(AssertionError, match="ran the model 2 times"):
        checks_precision.check_autocast_audit(audit_twice, checks_precision.ReusedLeafModel(8), x,
                                              torch.float16, "reused")


def test_check_amp_train_step_and_skips_inf():
    x, y = make_blobs(32, 6, 3, seed=31)

    def correct(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
        return amp_step(model, optimizer, scaler, x, y, max_norm, amp_dtype)

    def optimizer_step_directly(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        optimizer.step()
        return loss.item()

    log = checks_precision.check_amp_train_step(correct, 32, x, y, 0.05, torch.bfloat16)
    assert log.count("scaler_step") == 1
    checks_precision.check_amp_step_skips_inf(correct, x, y)
    with pytest.raises(AssertionError, match="stepped although the gradients held inf"):
        checks_precision.check_amp_step_skips_inf(optimizer_step_directly, x, y)


def test_clip_grads_scales_to_max_norm_and_leaves_small_gradients():
    grads = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([[4.0]])}
    clipped = clip_grads(grads, 1.0)
    norm = torch.linalg.vector_norm(torch.cat([g.flatten() for g in clipped.values()]))
    assert abs(float(norm) - 1.0) < 1e-5
    assert clipped["b"].shape == (1, 1)
    assert compare(clip_grads(grads, 100.0), grads).max_abs_error == 0
