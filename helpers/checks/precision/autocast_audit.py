"""Exercise 2, the autocast audit: the report of every leaf's output dtype (against a replay under
autocast, in the grader), then what the audit left behind: hooks, attributes, changed parameters."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from helpers.checks.precision.evidence import _same_tensors
from helpers.collect.precision import ReusedLeafModel, collect_autocast_audit
from helpers.diagnosis import mistake
from helpers.grads import GradDict, compare, param_snapshot
from helpers.transport import errors, remote

# Errors a realistic mistake makes torch (or Python) raise inside an exercise of lesson 01, matched
# on the message's own words, and what the course says about each. A pattern appears only in the
# error its mistake causes, so each fixed text is shown only when its cause is the cause.
AUDIT_ERRORS = (
    errors.Known("hook_returned_value", "must be Tensor, not",
                 "a layer received something that is not a tensor: a forward hook that returns a value "
                 "replaces the module's output. Record the dtype and return None from the hook"),
    errors.Known("hook_read_wrong_argument", "object has no attribute 'dtype'",
                 "a hook read .dtype of something that is not a tensor: the hook is called as "
                 "hook(module, inputs, output), and output is the tensor to read"),
)


def replay(model: ReusedLeafModel, x: torch.Tensor, dtype: torch.dtype) -> ReusedLeafModel:
    """Run a ReusedLeafModel once under autocast (no gradients) so its `ran` and `first` hold the
    reference for Exercise 2; returns the model."""
    with torch.no_grad(), torch.autocast(x.device.type, dtype=dtype):
        model(x)
    return model


def check_audit(report, expected: dict, model_label: str, first: dict | None = None) -> None:
    """Assert an Exercise 2 report equals `expected` ({leaf name: last output dtype}, in the order
    the leaves first ran). `first` (a leaf's first output dtype) names the leaf that ran twice."""
    if not isinstance(report, dict):
        raise mistake("wrong_return_type",
                      f"autocast_audit should return a dict, got {type(report).__name__}")
    never_ran = [name for name in report if name not in expected]
    if never_ran:
        raise mistake(
            "reported_non_leaf",
            f"for {model_label}, the report names {never_ran}, which did not run as a leaf in this "
            f"forward pass (the leaves that ran are {list(expected)}): report only leaf modules, "
            "those without children, and only those that ran")
    not_dtypes = {name: value for name, value in report.items() if not isinstance(value, torch.dtype)}
    if not_dtypes:
        name, value = next(iter(not_dtypes.items()))
        raise mistake("report_values_not_dtypes",
                      f"the report maps {name!r} to {value!r} ({type(value).__name__}): map each "
                      "leaf's name to the torch.dtype of its output, such as torch.bfloat16")
    if report and expected and all(d == torch.float32 for d in report.values()) and \
            any(d != torch.float32 for d in expected.values()):
        raise mistake("forward_outside_autocast",
                      "every layer ran in float32: run the forward pass inside torch.autocast(...)")
    if list(report) != list(expected):
        twice = [name for name in (first or {}) if first[name] != expected[name]]
        if twice and set(report) == set(expected):
            raise mistake(
                "reused_leaf_moved",
                f"for {model_label}, the report lists {list(report)}, but the leaves first ran in the order "
                f"{list(expected)}: {twice[0]!r} runs twice and keeps the place of its first run")
        raise mistake("leaves_out_of_order",
                      f"for {model_label}, the report should name the leaf modules {list(expected)} "
                      f"in the order they ran, got {list(report)}")
    for name, dtype in expected.items():
        if report[name] == dtype:
            continue
        if first and name in first and report[name] == first[name] != dtype:
            raise mistake(
                "reused_leaf_first_dtype",
                f"for {model_label}, {name!r} ran twice, first giving {first[name]} and last {dtype}; your "
                f"audit says {report[name]}: a leaf that runs twice reports its LAST output's dtype")
        raise mistake("wrong_leaf_dtype",
                      f"for {model_label}, {name} produced {dtype} under autocast, your audit "
                      f"says {report[name]}")


def check_audit_left_no_trace(trace: dict, params_before: GradDict, label: str = "the model",
                              dtype: torch.dtype | None = None) -> None:
    """Assert that Exercise 2 removed every hook it attached (to the model's modules or parameters,
    or for every module) and anything else it set on a module, and kept the parameters, from the
    collector's `audit_trace`."""
    left, global_left = trace.get("module_hooks"), trace.get("global_hooks")
    if not (isinstance(left, list) and isinstance(global_left, list)):
        raise mistake("evidence_unreadable", "could not read which hooks your audit left on the model")
    if left:
        raise mistake("hooks_left_on_model",
                      f"remove your {' and '.join(map(str, left))} before returning: the audit "
                      "must leave the model as it found it")
    if global_left:
        raise mistake("global_hooks_left",
                      f"remove the global {' and '.join(map(str, global_left))} before returning "
                      "(register_module_... hooks run for every module)")
    added = trace.get("added", [])
    if isinstance(added, list) and added:
        raise mistake("attributes_left_on_model",
                      f"for {label}, remove what your audit attached to the model before returning "
                      f"({', '.join(map(str, added[:3]))}{' ...' if len(added) > 3 else ''}): the audit "
                      "must leave the model as it found it")
    parameters = _same_tensors(trace.get("parameters"), params_before)
    if parameters is None:
        raise mistake("evidence_unreadable", "could not read the model's parameters after your audit")
    result = compare(parameters, params_before)
    if result.max_abs_error == 0:
        return
    if dtype is not None and all(torch.equal(parameters[name], before.to(dtype).to(before.dtype))
                                 for name, before in params_before.items() if before is not None):
        raise mistake("parameters_rounded",
                      f"for {label}, your audit rounded the parameters to {dtype} ({result}): casting "
                      f"the model to {dtype} and back loses their low bits; autocast needs no cast, "
                      "it picks each operation's dtype as the forward runs")
    raise mistake("parameters_changed",
                  f"for {label}, the parameters changed ({result}): the audit only watches a forward "
                  "pass, so nothing may step, cast or edit the model's parameters")


def autocast_audit_reference(sequential: nn.Module, x: torch.Tensor, dtype: torch.dtype) -> dict:
    """Exercise 2's answer for a (nested) Sequential, in the grader: each leaf in turn under
    autocast, named as named_modules() names it, with the dtype it returned."""
    expected, hidden = {}, x
    with torch.no_grad(), torch.autocast(x.device.type, dtype=dtype):
        for name, leaf in sequential.named_modules():
            if next(leaf.children(), None) is None:
                hidden = leaf(hidden)
                expected[name] = hidden.dtype
    return expected


def check_autocast_audit(audit: Callable, model: nn.Module, x: torch.Tensor, dtype: torch.dtype,
                         label: str, reference: Callable = autocast_audit_reference) -> dict:
    """Exercise 2: run audit(model, x, dtype) once on a copy of `model` and assert its report equals
    the reference: `reference(model, x, dtype)` (a replay of a Sequential under autocast, here in
    the grader), or for a ReusedLeafModel a replay of `model` itself (and the copy ran once); then
    that no hook is left on the copy and its parameters are unchanged. Returns the report."""
    before = param_snapshot(model)
    outcome = remote.run_student(audit, collect_autocast_audit, model, x, dtype)
    remote.raise_if_raised("autocast_audit", outcome, known=AUDIT_ERRORS,
                           expected="reports the output dtype of every leaf that ran")
    if "value" not in outcome:
        raise mistake("wrong_return_type",
                      f"autocast_audit should return a dict, got {outcome.get('returned')}")
    report = outcome["value"]
    if isinstance(model, ReusedLeafModel):
        replay(model, x, dtype)
        check_audit(report, model.ran, label, first=model.first)
        # Counted, since a second forward leaves the same report: the text asks for one model(x).
        calls = outcome.get("calls")
        if calls != 1:
            raise mistake("extra_forward_passes",
                          f"the report is right, but autocast_audit ran the model {calls} times: "
                          "run model(x) once")
    else:
        check_audit(report, reference(model, x, dtype), label)
    check_audit_left_no_trace(outcome.get("trace") or {}, before, label, dtype)
    return report
