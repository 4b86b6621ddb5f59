"""What travels between a check and the student's code: plain data and tensors, never code.

At grading the check runs in the grader's process and the student's function in the sandboxed
kernel (helpers.transport.remote). `encode` turns a value into a JSON-ready tree plus a list of byte
buffers (one per tensor); `decode` builds it back. What the grader decodes from the kernel is
rebuilt from scratch as exact built-in types (bool, int, float, str, list, tuple, dict) and plain
tensors (a path travels as its str): no subclass, no object with methods of its own, nothing
unpickled, so a value cannot pretend to equal the right answer. Only the grader sends richer
values into the kernel: modules (rebuilt from their attributes, parameters, buffers and
gradients), functions of torch named by path, and the few helper objects a check hands to a
student (`carried` classes).
"""

from __future__ import annotations

import importlib
import math
import operator
import os

import torch
from torch import nn

MAX_DEPTH = 64
MAX_ITEMS = 200_000
MAX_STRING = 1_000_000
MAX_TENSOR_BYTES = 256 * 2**20
# All the tensors of one decoded value together: a reply past it is the student's failure, and the
# grader's memory stays bounded whatever a kernel sends.
MAX_DECODED_BYTES = 512 * 2**20
# Where the kernel may resolve a function or class the grader names; the kernel never sends these.
TRUSTED_PREFIXES = ("torch.", "helpers.", "math.")
_DTYPES = {str(dtype).removeprefix("torch."): dtype for dtype in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool)}


class WireError(ValueError):
    """A value that cannot travel, or a tree that is not what encode makes."""


def carried(*fields: str):
    """Class decorator: instances travel as these attributes and are rebuilt without __init__."""
    def mark(cls):
        cls.__wire_fields__ = fields
        return cls
    return mark


def _path(obj) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def _trusted(path: str):
    if not path.startswith(TRUSTED_PREFIXES) or "<" in path:
        raise WireError(f"{path} is not something a check may send")
    module_name, _, name = path.rpartition(".")
    while module_name:
        try:
            obj = importlib.import_module(module_name)
            break
        except ImportError:
            module_name, _, outer = module_name.rpartition(".")
            name = f"{outer}.{name}"
    else:
        raise WireError(f"cannot find {path}")
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


_MODULE_INTERNALS = frozenset(vars(nn.Module()))


class _Encoder:
    def __init__(self, objects: bool):
        self.buffers: list[bytes] = []
        self.objects = objects
        self.seen: dict[int, int] = {}       # id(tensor or module) -> reference number
        self.items = 0

    def tensor(self, value: torch.Tensor) -> dict:
        if id(value) in self.seen:
            return {"t": "ref", "n": self.seen[id(value)]}
        self.seen[id(value)] = len(self.seen)
        plain = value.detach().cpu().contiguous()
        if plain.dtype not in _DTYPES.values():
            plain = plain.float()
        # A 0-dim tensor (a loss returned unreduced to a float) cannot be viewed as bytes until flattened.
        self.buffers.append(plain.reshape(-1).view(torch.uint8).numpy().tobytes() if plain.numel() else b"")
        node = {"t": "tensor", "buffer": len(self.buffers) - 1, "shape": list(plain.shape),
                "dtype": str(plain.dtype).removeprefix("torch."), "requires_grad": bool(value.requires_grad)}
        if self.objects and isinstance(value, nn.Parameter):
            node["parameter"] = True
        if self.objects and value.grad is not None:
            node["grad"] = self.tensor(value.grad)
        return node

    def module(self, module: nn.Module) -> dict:
        if id(module) in self.seen:
            return {"t": "ref", "n": self.seen[id(module)]}
        self.seen[id(module)] = len(self.seen)
        attributes = {k: self.value(v, 1) for k, v in vars(module).items() if k not in _MODULE_INTERNALS}
        def each(items, encode):
            return {name: None if item is None else encode(item) for name, item in items.items()}

        return {"t": "module", "class": _path(type(module)), "training": module.training,
                "attributes": attributes, "parameters": each(module._parameters, self.tensor),
                "buffers": each(module._buffers, self.tensor), "children": each(module._modules, self.module)}

    def value(self, value, depth: int = 0):
        self.items += 1
        if depth > MAX_DEPTH or self.items > MAX_ITEMS:
            raise WireError("the value is nested too deeply or holds too many items to travel")
        if value is None or type(value) in (bool, str):
            return value
        if isinstance(value, bool):
            return bool(value)
        if isinstance(value, int):
            return int.__add__(value, 0)
        if isinstance(value, float):
            number = float.__add__(value, 0.0)
            return number if math.isfinite(number) else {"t": "float", "repr": repr(number)}
        if isinstance(value, str):
            return str.__str__(value)
        if isinstance(value, torch.Tensor):
            return self.tensor(value)
        if isinstance(value, os.PathLike):
            # A path travels as its text: a file named in the kernel is read there, by a collector.
            try:
                path = os.fspath(value)
            except Exception as error:  # noqa: BLE001 - a student's path class may raise anything
                raise WireError(f"a {type(value).__name__} whose path cannot be read") from error
            if isinstance(path, str):
                return str.__str__(path)
        if isinstance(value, torch.dtype):
            return {"t": "dtype", "name": str(value).removeprefix("torch.")}
        if isinstance(value, torch.device):
            return {"t": "device", "name": str(value)}
        if isinstance(value, (list, tuple)):
            return {"t": "tuple" if isinstance(value, tuple) else "list",
                    "items": [self.value(v, depth + 1) for v in value]}
        if isinstance(value, dict):
            return {"t": "dict", "items": [[self.value(k, depth + 1), self.value(v, depth + 1)]
                                           for k, v in value.items()]}
        if self.objects and isinstance(value, nn.Module):
            return self.module(value)
        if self.objects and hasattr(type(value), "__wire_fields__"):
            fields = type(value).__wire_fields__
            return {"t": "object", "class": _path(type(value)),
                    "fields": {f: self.value(getattr(value, f), depth + 1) for f in fields}}
        if self.objects and callable(value) and _path(value).startswith(TRUSTED_PREFIXES):
            return {"t": "callable", "path": _path(value)}
        for convert in (operator.index, float):   # numpy numbers and the like
            try:
                return self.value(convert(value), depth + 1)
            except (TypeError, ValueError):
                continue
        raise WireError(f"a {type(value).__name__} cannot travel between the grader and the kernel")


def encode(value, objects: bool = False) -> tuple[object, list[bytes]]:
    """A JSON-ready tree and its tensor buffers. `objects`: modules, torch functions and `carried`
    helper objects may travel too (only from the grader to the kernel)."""
    encoder = _Encoder(objects)
    return encoder.value(value), encoder.buffers


class _Decoder:
    def __init__(self, buffers, objects: bool):
        self.buffers, self.objects = list(buffers), objects
        self.seen: list[object] = []
        self.items = 0
        self.used_buffers: set[int] = set()
        self.decoded_bytes = 0

    def tensor(self, node: dict) -> torch.Tensor:
        dtype = _DTYPES.get(node.get("dtype"))
        shape = node.get("shape")
        if dtype is None or not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            raise WireError("a tensor without a known dtype and shape")
        index = node.get("buffer")
        if type(index) is not int or not 0 <= index < len(self.buffers):
            raise WireError("a tensor without its bytes")
        # encode gives each tensor a buffer of its own and sends a repeat as a "ref": a buffer named
        # twice would be copied once per name, a reply that grows many times its size here.
        if index in self.used_buffers:
            raise WireError("two tensors that name the same bytes")
        self.used_buffers.add(index)
        raw = self.buffers[index]
        size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if len(raw) != size or size > MAX_TENSOR_BYTES:
            raise WireError("a tensor whose bytes do not match its shape")
        self.decoded_bytes += size
        if self.decoded_bytes > MAX_DECODED_BYTES:
            raise WireError(f"tensors of more than {MAX_DECODED_BYTES // 2**20} MiB in all")
        # A writable copy for frombuffer, then the tensor's own allocation (clone): aligned as the
        # allocator aligns, which the matrix kernels need to run at full speed. The first copy is
        # freed at once, so a reply's tensors hold their bytes once.
        flat = (torch.frombuffer(bytearray(raw), dtype=torch.uint8) if size
                else torch.empty(0, dtype=torch.uint8))
        tensor = flat.view(dtype).reshape(shape).clone()
        if self.objects and node.get("parameter"):
            tensor = nn.Parameter(tensor, requires_grad=bool(node.get("requires_grad")))
        elif node.get("requires_grad") is True and tensor.is_floating_point():
            tensor.requires_grad_(True)
        self.seen.append(tensor)
        if self.objects and isinstance(node.get("grad"), dict):
            tensor.grad = self.value(node["grad"])
        return tensor

    def module(self, node: dict) -> nn.Module:
        cls = _trusted(node["class"])
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise WireError(f"{node['class']} is not a module class")
        module = cls.__new__(cls)
        nn.Module.__init__(module)
        self.seen.append(module)
        for name, value in node["attributes"].items():
            module.__dict__[name] = self.value(value, 1)
        module.training = bool(node["training"])
        for name, value in node["parameters"].items():
            module._parameters[name] = None if value is None else self.value(value, 1)
        for name, value in node["buffers"].items():
            module._buffers[name] = None if value is None else self.value(value, 1)
        for name, value in node["children"].items():
            module._modules[name] = None if value is None else self.value(value, 1)
        return module

    def value(self, node, depth: int = 0):
        self.items += 1
        if depth > MAX_DEPTH or self.items > MAX_ITEMS:
            raise WireError("the value is nested too deeply or holds too many items")
        if node is None or type(node) in (bool, int):
            return node
        if type(node) is float:
            return node
        if type(node) is str:
            if len(node) > MAX_STRING:
                raise WireError("a string too long to read")
            return node
        if type(node) is not dict or type(node.get("t")) is not str:
            raise WireError(f"a {type(node).__name__} where a tagged value was expected")
        kind = node["t"]
        if kind == "float" and node.get("repr") in ("nan", "inf", "-inf"):
            return float(node["repr"])
        if kind in ("list", "tuple") and type(node.get("items")) is list:
            items = [self.value(item, depth + 1) for item in node["items"]]
            return items if kind == "list" else tuple(items)
        if kind == "dict" and type(node.get("items")) is list:
            if not all(type(pair) is list and len(pair) == 2 for pair in node["items"]):
                raise WireError("a dict whose items are not pairs")
            pairs = [(self.value(k, depth + 1), self.value(v, depth + 1)) for k, v in node["items"]]
            if any(isinstance(k, (list, dict)) for k, _ in pairs):
                raise WireError("a dict key that is not a plain value")
            return dict(pairs)
        if kind == "tensor":
            return self.tensor(node)
        if kind == "ref" and type(node.get("n")) is int and 0 <= node["n"] < len(self.seen):
            return self.seen[node["n"]]
        if kind == "dtype" and node.get("name") in _DTYPES:
            return _DTYPES[node["name"]]
        if kind == "device" and type(node.get("name")) is str:
            return torch.device(node["name"])
        if self.objects and kind == "module":
            return self.module(node)
        if self.objects and kind == "callable":
            return _trusted(node["path"])
        if self.objects and kind == "object":
            cls = _trusted(node["class"])
            obj = cls.__new__(cls)
            for name in getattr(cls, "__wire_fields__", ()):
                setattr(obj, name, self.value(node["fields"][name], depth + 1))
            return obj
        raise WireError(f"a value of kind {kind!r} cannot be read here")


def decode(tree, buffers=(), objects: bool = False):
    """Build back what `encode` made. Without `objects` (what the grader reads from a kernel) only
    plain data and tensors come out; anything else is a WireError."""
    return _Decoder(buffers, objects).value(tree)
