"""Device choice, low-precision dtype, synchronisation, seeding and workload size."""

from __future__ import annotations

import os
import random

import torch

from helpers import validate

_GRADING_MODES = frozenset({"autograde", "validate"})
_LOW_PRECISION_BY_TYPE = {"mps": torch.float16, "cpu": torch.bfloat16}


def _as_device(device: torch.device | str) -> torch.device:
    if isinstance(device, torch.device):
        return device
    if isinstance(device, str):
        try:
            return torch.device(device)
        except RuntimeError as error:
            raise ValueError(f"{device!r} is not a device name such as 'cpu' or 'cuda'") from error
    raise TypeError(f"device must be a torch.device or a str, got {type(device).__name__}")


def pick_device() -> torch.device:
    """Return the best available device: cuda, else mps, else cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def low_precision_dtype(device: torch.device | str) -> torch.dtype:
    """Return the 16-bit float dtype autocast should use on `device` (bfloat16 or float16)."""
    device = _as_device(device)
    if device.type == "cuda":
        # Without including_emulation=False, T4 and V100 report bf16 "supported" (emulated, slow).
        return torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else torch.float16
    if device.type in _LOW_PRECISION_BY_TYPE:
        return _LOW_PRECISION_BY_TYPE[device.type]
    raise ValueError(f"no low-precision dtype known for device type {device.type!r}")


def synchronize(device: torch.device | str) -> None:
    """Wait until all queued work on `device` has finished; a no-op on cpu."""
    device = _as_device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
    elif device.type != "cpu":
        raise ValueError(f"cannot synchronize device type {device.type!r}")


def is_grading() -> bool:
    """Return True while nbgrader autogrades or validates (env NBGRADER_EXECUTION)."""
    return os.environ.get("NBGRADER_EXECUTION", "") in _GRADING_MODES


def use_real_size(device: torch.device | str) -> bool:
    """Return True when workloads should be full size: on a CUDA device and not grading."""
    return _as_device(device).type == "cuda" and not is_grading()


def by_size(small, real, device: torch.device | str):
    """Return `real` when use_real_size(device), else `small` (any type)."""
    return real if use_real_size(device) else small


def seed_everything(seed: int) -> None:
    """Seed Python's `random`, torch (CPU and all CUDA devices) and numpy if installed."""
    validate.seed(seed)
    random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    try:
        import numpy
    except ImportError:
        return
    # numpy only accepts seeds in [0, 2**32).
    numpy.random.seed(seed % 2**32)


def describe(device: torch.device | str) -> str:
    """Return a one-line description: device, low-precision dtype and workload size."""
    device = _as_device(device)
    name = device.type
    if device.type == "cuda":
        name = f"cuda ({torch.cuda.get_device_name(device)})"
    dtype_name = str(low_precision_dtype(device)).removeprefix("torch.")
    if use_real_size(device):
        workload = "real"
    elif is_grading():
        workload = "small (grading)"
    else:
        workload = f"small ({device.type.upper()})"
    return f"{name} · low precision: {dtype_name} · workload: {workload}"


# torch's own probes of the CPU; private, so each is optional.
_BF16_INSTRUCTIONS = (("AVX-512 BF16", "_is_avx512_bf16_supported"), ("AMX", "_is_amx_tile_supported"))


def cpu_bf16_support() -> str:
    """One line on what this CPU offers bf16 matrix products: ATen's vector level and the bf16
    instructions it has. Without any, bf16 products are emulated and can be many times slower
    than fp32 (the vector level alone says nothing about it: "AVX512" may or may not have them)."""
    level = torch.backends.cpu.get_cpu_capability()
    found = [name for name, probe in _BF16_INSTRUCTIONS if getattr(torch.cpu, probe, lambda: False)()]
    if found:
        return f"CPU vector level {level}; bf16 instructions: {', '.join(found)}"
    return f"CPU vector level {level}; no bf16 instructions: bf16 matrix products are emulated"
