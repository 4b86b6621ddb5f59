"""References a judge computes from the test's own inputs, kept for the next submission.

A grader judges a whole class against the same few models and batches, and lesson 02's references
(a full-batch SGD run, a single micro-batch's saved activations) cost more than the student's run
they are compared with. A function decorated with `kept` computes once per process what it returns
for equal arguments, and hands each caller a copy of its own. Arguments are equal when they are:
tensors of the same shape, dtype, requires_grad and bytes; modules of the same class, structure,
modes and state; the same function object (or a functools.partial of one, with equal arguments);
equal plain values, lists, tuples and dicts of these, and the lessons' datasets of equal tensors.
A call with any other argument is computed as if nothing were kept, and so is a result that
cannot be copied (a tensor in an autograd graph). Only a deterministic function of its arguments
may be kept.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import types
from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.data import TensorDataset

from helpers.data import SlowDataset

KEPT_RESULTS = 256
_PLAIN = (type(None), bool, int, float, str)
_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType)


class _NotKept(Exception):
    """An argument whose equality this module cannot decide."""


def _tensor_key(tensor: torch.Tensor) -> tuple:
    plain = tensor.detach().cpu().contiguous()
    digest = hashlib.blake2b(plain.reshape(-1).view(torch.uint8).numpy().tobytes(), digest_size=16)
    return ("tensor", tuple(plain.shape), str(plain.dtype), str(tensor.device), tensor.requires_grad,
            digest.hexdigest())


def _module_key(module: nn.Module) -> tuple:
    return ("module", type(module).__module__, type(module).__qualname__, repr(module),
            tuple(m.training for m in module.modules()),
            tuple((name, _tensor_key(p)) for name, p in module.named_parameters()),
            tuple((name, _tensor_key(b)) for name, b in module.named_buffers()))


def key_of(value, depth: int = 0) -> tuple:
    """A hashable key equal for equal arguments (see the module's docstring); _NotKept otherwise."""
    if depth > 8:
        raise _NotKept
    if type(value) in _PLAIN:
        return (type(value).__name__, value)
    if isinstance(value, torch.Tensor):
        return _tensor_key(value)
    if isinstance(value, nn.Module):
        return _module_key(value)
    if type(value) in (list, tuple):
        return (type(value).__name__, tuple(key_of(item, depth + 1) for item in value))
    if type(value) is dict and all(type(k) is str for k in value):
        return ("dict", tuple(sorted((k, key_of(v, depth + 1)) for k, v in value.items())))
    if isinstance(value, _FUNCTIONS):
        return ("function", value)      # the object itself: kept alive, its id cannot be reused
    if type(value) is functools.partial:
        return ("partial", key_of(value.func, depth + 1), key_of(value.args, depth + 1),
                key_of(dict(value.keywords), depth + 1))
    if isinstance(value, torch.dtype):
        return ("dtype", str(value))
    if type(value) is TensorDataset:
        return ("TensorDataset", key_of(tuple(value.tensors), depth + 1))
    if type(value) is SlowDataset:
        return ("SlowDataset", key_of((value.features, value.labels, value.delay_s), depth + 1))
    raise _NotKept


def kept(function: Callable | None = None, *, key: Callable | None = None) -> Callable:
    """Decorator: compute once per process per equal arguments, return a copy each time.
    `key(*args, **kwargs)`, if given, returns the hashable key instead (key_of helps build it): for
    a judge whose result depends on less than its arguments hold (a peak on a model's structure,
    not its weights)."""
    if function is None:
        return functools.partial(kept, key=key)
    results: OrderedDict = OrderedDict()

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            key_value = key_of((args, dict(kwargs))) if key is None else key(*args, **kwargs)
            hash(key_value)
        except (_NotKept, TypeError):
            return function(*args, **kwargs)
        if key_value not in results:
            result = function(*args, **kwargs)
            try:
                results[key_value] = copy.deepcopy(result)
            except Exception:  # noqa: BLE001 - a result with no copy of its own (a graph's tensor)
                return result
            if len(results) > KEPT_RESULTS:
                results.popitem(last=False)
            return result
        results.move_to_end(key_value)
        return copy.deepcopy(results[key_value])

    wrapper.kept_results = results
    return wrapper
