"""Unit tests of helpers.checks.precision and helpers.collect.precision: the checks of lesson 01.

The GradScaler call pattern (check_amp_calls) is tested with lesson 02's accumulation loops in
tests/units/test_helpers_checks_accumulation.py; here its single-step use, the audit, cast_fate and
AMP-step checks, lesson 01's error tables worded by errors.failure, and the checks as the grader runs them:
the student's function behind a channel (helpers.transport.remote), answering what a kernel would send.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.checks import precision as checks_precision
from helpers.checks.amp_calls import check_amp_calls, clip_grads
from helpers.checks.precision.amp_train_step import AMP_STEP_ERRORS, check_amp_step_gradient
from helpers.checks.precision.autocast_audit import check_audit, check_audit_left_no_trace, replay
from helpers.checks.precision.cast_fate import CAST_FATE_ERRORS
from helpers.collect.precision import ReusedLeafModel, audit_trace, module_attributes
from helpers.collect.specs import (
    build_optimizer,
    build_scaler,
    first_linear_dtypes,
    optimizer_spec,
    scaler_spec,
)
from helpers.data import make_blobs
from helpers.diagnosis import mistake_name
from helpers.grads import compare, param_snapshot
from helpers.models import MLP
from helpers.spies import record
from helpers.transport import errors, remote, wire
from helpers.transport.capture import stderr_on_stdout

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
# Lesson 01: stderr on stdout, errors in the course's words, the audit and AMP-step checks
# ---------------------------------------------------------------------------------------------

def test_stderr_on_stdout_keeps_stderr_empty_for_a_student_who_warns(capsys):
    import sys
    import warnings

    def chatty_cast_fate(values, dtype):
        warnings.warn("a harmless warning from the student's code", UserWarning, stacklevel=1)
        print("a note on stderr", file=sys.stderr)
        return ["exact"] * len(values)

    with stderr_on_stdout():
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
    with record(model=model, optimizer=optimizer, scaler=scaler) as log, stderr_on_stdout():
        warnings.warn("the student's own warning", UserWarning, stacklevel=1)
        print("the student's stderr", file=sys.stderr)
        amp_step(model, optimizer, scaler, x, y, 0.05, torch.float16)
    check_amp_calls(log, num_micro_batches=1, num_updates=1)
    check_amp_step_gradient(log.of("step")[0].info["grads"], reference, 0.05)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("raise_it", "phrase"), [
    (lambda: bool(torch.ones(2) == torch.ones(2)), "decide the fate of one value at a time"),
    (lambda: torch.ones(3).item(), "on the whole tensor"),
    (lambda: (1.0).to(torch.float16), "cast the whole tensor first"),
])
def test_failure_names_cast_fate_errors(raise_it, phrase):
    assert phrase in named_error("cast_fate", CAST_FATE_ERRORS, raise_it)


def test_failure_passes_not_implemented_through_and_names_no_cause_it_does_not_know():
    def stub():
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        named_error("cast_fate", CAST_FATE_ERRORS, stub)
    said = named_error("cast_fate", CAST_FATE_ERRORS, lambda: {}["something else"])
    assert said.startswith("cast_fate stopped with KeyError")
    assert not any(advice in said for _, advice in CAST_FATE_ERRORS)


def named_error(function, known, run) -> str:
    """What a check says when the student's `function` raised what run() raises."""
    return str(errors.failure(function, remote.raised_of(remote.called(run)), known=known))


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
        check_amp_step_gradient(candidate, reference, 0.05, stale=5.0, scale=1024.0)
        assert loss == reference.loss
    else:
        with pytest.raises(AssertionError, match=phrase):
            check_amp_step_gradient(candidate, reference, 0.05, stale=5.0, scale=1024.0)


def test_check_amp_step_gradient_names_gradients_cleared_before_step():
    x, y = make_blobs(32, 6, 3, seed=31)
    model = MLP(6, 8, 3, seed=32)
    reference = checks_precision.amp_reference_step(model, F.cross_entropy, x, y, 0.05, torch.float16, 1024.0)
    with pytest.raises(AssertionError, match="cleared between backward and step"):
        check_amp_step_gradient({n: None for n in reference.grads}, reference, 0.05)


@pytest.mark.parametrize(("mistake", "phrase"), [
    ({"unscale_twice": True}, "ran twice in one step"),
    ({"scaled": False}, "not loss.backward()"),
])
def test_failure_names_gradscaler_errors_of_one_step(mistake, phrase):
    x, y = make_blobs(32, 6, 3, seed=31)
    model = MLP(6, 8, 3, seed=32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    said = named_error("amp_train_step", AMP_STEP_ERRORS,
                       lambda: amp_step(model, optimizer, scaler, x, y, 0.05, torch.float16, **mistake))
    assert phrase in said


def test_failure_names_an_update_that_runs_twice():
    x, y = make_blobs(32, 6, 3, seed=31)
    model = MLP(6, 8, 3, seed=32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)

    def updates_twice():
        amp_step(model, optimizer, scaler, x, y, 0.05, torch.float16)
        scaler.update()

    error = errors.failure("amp_train_step", remote.raised_of(remote.called(updates_twice)),
                           known=AMP_STEP_ERRORS)
    assert mistake_name(error) == "update_twice"
    assert "call it once, right after scaler.step(optimizer)" in str(error)


def test_failure_names_a_step_without_update_on_the_next_step():
    x, y = make_blobs(32, 6, 3, seed=31)
    model = MLP(6, 8, 3, seed=32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)

    def two_steps_without_update():
        for _ in range(2):
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(F.cross_entropy(model(x), y)).backward()
            scaler.unscale_(optimizer)
            scaler.step(optimizer)

    said = named_error("amp_train_step", AMP_STEP_ERRORS, two_steps_without_update)
    assert "call scaler.update() once right after every scaler.step(optimizer)" in said



def test_reused_leaf_model_records_last_dtype_in_first_place():
    model = replay(checks_precision.ReusedLeafModel(8), torch.randn(3, 8), torch.bfloat16)
    assert list(model.ran) == ["act", "lin"] and model.calls == 1
    assert model.first["act"] == torch.float32 and model.ran["act"] == torch.bfloat16
    check_audit(dict(model.ran), model.ran, "probe", first=model.first)


@pytest.mark.parametrize(("report", "phrase"), [
    ({"act": torch.float32, "lin": torch.bfloat16}, "reports its LAST output's dtype"),
    ({"lin": torch.bfloat16, "act": torch.bfloat16}, "keeps the place of its first run"),
    ({"act": torch.bfloat16, "lin": torch.bfloat16, "unused": None}, "only those that ran"),
    ({"act": torch.float32, "lin": torch.float32}, "inside torch.autocast"),
    ({"act": "torch.bfloat16", "lin": "torch.bfloat16"}, "map each leaf's name to the torch.dtype"),
    ([("act", torch.bfloat16)], "should return a dict"),
])
def test_check_audit_names_the_clause(report, phrase):
    model = replay(checks_precision.ReusedLeafModel(8), torch.randn(3, 8), torch.bfloat16)
    with pytest.raises(AssertionError, match=phrase):
        check_audit(report, model.ran, "probe", first=model.first)


def test_check_audit_left_no_trace():
    model = nn.Sequential(nn.Linear(4, 4))
    before = param_snapshot(model)
    check_audit_left_no_trace(audit_trace(model), before)
    handle = model[0].register_forward_hook(lambda *args: None)
    with pytest.raises(AssertionError, match="remove your forward hooks"):
        check_audit_left_no_trace(audit_trace(model), before)
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *args: None)
    try:
        with pytest.raises(AssertionError, match="remove the global forward hooks"):
            check_audit_left_no_trace(audit_trace(model), before)
    finally:
        handle.remove()
    with torch.no_grad():
        model[0].weight.add_(1.0)
    with pytest.raises(AssertionError, match="the parameters changed"):
        check_audit_left_no_trace(audit_trace(model), before)
    with pytest.raises(AssertionError, match="could not read the model's parameters"):   # no trace
        check_audit_left_no_trace({"module_hooks": [], "global_hooks": []}, before)
    with pytest.raises(AssertionError, match="could not read which hooks"):
        check_audit_left_no_trace({"module_hooks": False, "global_hooks": False}, before)


def test_an_audit_that_rounds_the_parameters_or_leaves_an_attribute_is_told_so():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    before = param_snapshot(model)
    model.to(torch.bfloat16).to(torch.float32)
    with pytest.raises(AssertionError, match="rounded the parameters to torch.bfloat16") as problem:
        check_audit_left_no_trace(audit_trace(model), before, "a probe", torch.bfloat16)
    assert problem.value.mistake == "parameters_rounded"
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    attributes = module_attributes(model)
    model[1].seen = torch.float32
    model.register_buffer("report", torch.zeros(1))
    with pytest.raises(AssertionError, match=r"attached to the model before returning \(report, 1.seen\)"):
        check_audit_left_no_trace(audit_trace(model, attributes), param_snapshot(model))


@pytest.mark.parametrize(("attach", "says"), [
    (lambda m: m[0].register_forward_pre_hook(lambda *args: None), "remove your forward pre-hooks"),
    (lambda m: m[0].register_full_backward_hook(lambda *args: None), "remove your backward hooks"),
    (lambda m: m[0].weight.register_hook(lambda grad: grad), "remove your gradient hooks on parameters"),
    (lambda m: torch.nn.modules.module.register_module_forward_pre_hook(lambda *args: None),
     "remove the global forward pre-hooks"),
])
def test_an_audit_must_remove_every_kind_of_hook_it_attached(attach, says):
    model = nn.Sequential(nn.Linear(4, 4))
    handle = attach(model)
    try:
        with pytest.raises(AssertionError, match=says):
            check_audit_left_no_trace(audit_trace(model), param_snapshot(model))
    finally:
        handle.remove()


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

    def skips_the_inf_step_itself(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if torch.isfinite(norm):
            scaler.step(optimizer)
        scaler.update()              # unscale_ recorded the inf: the scale still halves
        return loss.item()

    log = checks_precision.check_amp_train_step(correct, 32, x, y, 0.05, torch.bfloat16)
    assert log.count("scaler_step") == 1
    checks_precision.check_amp_step_skips_inf(correct, x, y)
    with pytest.raises(AssertionError, match="stepped although the gradients held inf"):
        checks_precision.check_amp_step_skips_inf(optimizer_step_directly, x, y)
    checks_precision.check_amp_train_step(skips_the_inf_step_itself, 32, x, y, 0.05, torch.float16)
    with pytest.raises(AssertionError, match=r"scaler.step\(optimizer\) ran 0 times: call it on every step"):
        checks_precision.check_amp_step_skips_inf(skips_the_inf_step_itself, x, y)


def test_clip_grads_scales_to_max_norm_and_leaves_small_gradients():
    grads = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([[4.0]])}
    clipped = clip_grads(grads, 1.0)
    norm = torch.linalg.vector_norm(torch.cat([g.flatten() for g in clipped.values()]))
    assert abs(float(norm) - 1.0) < 1e-5
    assert clipped["b"].shape == (1, 1)
    assert compare(clip_grads(grads, 100.0), grads).max_abs_error == 0


# ---------------------------------------------------------------------------------------------
# The checks as the grader runs them: inputs and results through helpers.transport.wire, the student's
# function behind a channel. An honest kernel runs the collector (remote.serve); a lying one sends
# whatever it likes, and its spies' record alone never passes a check.
# ---------------------------------------------------------------------------------------------

def behind_a_channel(function, name="the_students_function"):
    """The student's function as the grader sees it: a StudentFunction whose kernel runs the collector."""
    def channel(collector, _function_name, tree, buffers):
        return remote.serve(collector, function, tree, buffers)

    return remote.StudentFunction(name, channel)


def lying_kernel(answer):
    """A StudentFunction whose kernel answers `answer(inputs)` (the decoded inputs) to every call."""
    def channel(_collector, _function_name, tree, buffers):
        return wire.encode(answer(wire.decode(tree, buffers, objects=True)))

    return remote.StudentFunction("amp_train_step", channel)


def correct_step(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
    return amp_step(model, optimizer, scaler, x, y, max_norm, amp_dtype)


def correct_audit(model, x, dtype):
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


def test_the_checks_pass_a_right_answer_behind_a_channel():
    values = torch.tensor([1.0, 70000.0, 1e-8, 2.0 ** -24, 0.1])
    checks_precision.check_cast_fate(behind_a_channel(fates_reference), values, fates_reference)
    report = checks_precision.check_autocast_audit(behind_a_channel(correct_audit), ReusedLeafModel(8),
                                                   torch.randn(3, 8), torch.bfloat16, "reused")
    assert report == {"act": torch.bfloat16, "lin": torch.bfloat16}
    x, y = make_blobs(32, 6, 3, seed=31)
    log = checks_precision.check_amp_train_step(behind_a_channel(correct_step), 32, x, y, 0.05, torch.float16,
                                                init_scale=256.0)
    assert log.summary() == "zero_grad, scale, backward, unscale_, clip, scaler_step, step, update"
    checks_precision.check_amp_step_skips_inf(behind_a_channel(correct_step), x, y)


def test_a_reused_leaf_model_is_rebuilt_from_the_collectors_module():
    """checks_precision is a stub in the grading kernel: the test cell's model must name a class the
    kernel can import."""
    tree, _ = wire.encode(checks_precision.ReusedLeafModel(8), objects=True)
    assert tree["class"] == "helpers.collect.precision.ReusedLeafModel"


def test_collect_precision_never_imports_the_references():
    import subprocess
    import sys

    probe = ("import sys, helpers.collect.precision; "
             "assert 'helpers.checks.precision' not in sys.modules, 'imports the references'")
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_optimizer_and_scaler_specs_rebuild_them_fresh():
    parameters = [nn.Parameter(torch.ones(2))]
    for optimizer in (torch.optim.SGD(parameters, lr=0.5), torch.optim.SGD(parameters, lr=0.1, momentum=0.9),
                      torch.optim.Adam(parameters, lr=1e-3, betas=(0.8, 0.99))):
        spec = wire.decode(*wire.encode(optimizer_spec(optimizer)))
        rebuilt = build_optimizer(spec, [nn.Parameter(torch.zeros(2))])
        assert type(rebuilt) is type(optimizer) and rebuilt.defaults == optimizer.defaults
    with pytest.raises(ValueError, match="not an optimizer"):
        build_optimizer({"class": "Tensor", "defaults": {}}, parameters)
    scaler = torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=7)
    rebuilt = build_scaler(wire.decode(*wire.encode(scaler_spec(scaler))))
    assert rebuilt.get_scale() == 256.0 and rebuilt._growth_interval == 7 and rebuilt._device == "cpu"


def test_errors_the_course_does_not_name_are_said_as_the_students():
    def broken(values, dtype):
        raise KeyError("fate")

    with pytest.raises(AssertionError, match="cast_fate stopped with KeyError: 'fate'"):
        checks_precision.check_cast_fate(broken, torch.tensor([1.0]), fates_reference)

    def ambiguous(values, dtype):
        return ["exact" if values == values.to(dtype) else "rounded"]

    with pytest.raises(AssertionError, match="decide the fate of one value at a time"):
        checks_precision.check_cast_fate(ambiguous, torch.tensor([1.0, 2.0]), fates_reference)


def test_an_audit_keyed_by_modules_is_shown_not_lost():
    def by_module(model, x, dtype):
        return {module: dtype for module in model.children()}

    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    with pytest.raises(AssertionError, match=r"the report names \['Linear"):
        checks_precision.check_autocast_audit(by_module, model, torch.randn(3, 8), torch.bfloat16, "two",
                                              lambda m, x, d: {"0": d, "1": d})


def test_a_loss_returned_as_a_tensor_is_named():
    def tensor_loss(*args, **kwargs):
        correct_step(*args, **kwargs)
        return torch.tensor(1.0)

    x, y = make_blobs(32, 6, 3, seed=31)
    with pytest.raises(AssertionError, match="return the loss as a float .loss.item..., not Tensor"):
        checks_precision.check_amp_train_step(tensor_loss, 32, x, y, 0.05, torch.float16)


def perfect_record(inputs, parameters, scale, loss=1.0):
    """What a kernel that lies sends: the spies' record of a right step, with the parameters given."""
    (model, _optimizer, _scaler, args, kwargs), _ = inputs
    amp_dtype = kwargs.get("amp_dtype", args[-1] if args else torch.float16)
    calls = [{"name": name, "info": info} for name, info in (
        ("zero_grad", {}), ("scale", {"scale": 1024.0}), ("backward", {}), ("unscale_", {}),
        ("clip", {"norm_seen": 1.0}), ("scaler_step", {}), ("update", {}))]
    return {"value": loss, "dtypes": [amp_dtype], "calls": calls, "scale": scale,
            "parameters": parameters(model)}


def test_a_kernels_record_alone_earns_nothing():
    x, y = make_blobs(32, 6, 3, seed=31)
    model = MLP(6, 8, 3, seed=32)
    reference = checks_precision.amp_reference_step(model, F.cross_entropy, x, y, 0.05, torch.float16, 1024.0)

    def claims_the_right_step(inputs):
        answer = perfect_record(inputs, param_snapshot, 1024.0, reference.loss)
        answer["calls"].insert(5, {"name": "step", "info": {"grads": reference.grads}})   # never used
        return answer

    with pytest.raises(AssertionError, match="parameters after the step are not those of one SGD step"):
        checks_precision.check_amp_train_step(lying_kernel(claims_the_right_step), 32, x, y, 0.05,
                                              torch.float16)

    def claims_a_skipped_step(inputs):
        def stepped(model):
            return {name: p + 1.0 for name, p in param_snapshot(model).items()}
        return perfect_record(inputs, stepped, 512.0)

    with pytest.raises(AssertionError, match="after an inf gradient the parameters changed"):
        checks_precision.check_amp_step_skips_inf(lying_kernel(claims_a_skipped_step), x, y)

    def claims_nothing(inputs):
        return {"value": 1.0, "calls": "everything right"}

    with pytest.raises(AssertionError, match="first Linear layer ran in nothing"):
        checks_precision.check_amp_train_step(lying_kernel(claims_nothing), 32, x, y, 0.05, torch.float16)


def test_the_graders_cast_fate_reference_agrees_with_the_tests_own():
    values = torch.tensor([1.0, 0.1, 70000.0, 1e-8, 3e-8, 2.0 ** -14, 1e-39, 65504.0, 65520.0])
    for dtype in (torch.float16, torch.bfloat16):
        assert checks_precision.cast_fate_reference(values, dtype) == fates_reference(values, dtype)


def test_clipping_each_entry_instead_of_the_norm_is_named():
    def clips_values(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        return loss.item()

    x, y = make_blobs(32, 6, 3, seed=31)
    with pytest.raises(AssertionError, match="you clipped with clip_grad_value_"):
        checks_precision.check_amp_train_step(clips_values, 32, x, y, 0.05, torch.float16)
