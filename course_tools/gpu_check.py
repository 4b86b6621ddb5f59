"""`make gpu-check`: run the course on a CUDA GPU and measure each lesson's figures at real size.

Two parts, both written into one report (gpu-report/report.md, the raw numbers in report.json):

1. nbval over notebooks/ on the GPU (pyproject's addopts: --nbval-lax, so only the cells marked
   NBVAL_CHECK_OUTPUT compare their output, and they must print what they print on a CPU);
2. the figures each lesson talks about, measured at real size with warm-up, synchronisation and
   medians (helpers.timing) and the allocator's peak after reset_peak_memory_stats
   (helpers.memory): mixed precision, gradient accumulation, the profiling lesson's fixes, and
   memory by technique.

Without a CUDA GPU it says so in one line, runs every measurement at a tiny size on the CPU (that
proves the code paths, not the figures), writes a report marked as a CPU self-test and exits 0.
`--self-test` forces that path on a GPU machine too. Written for torch 2.4 or newer.

    python -m course_tools.gpu_check [--out gpu-report] [--self-test] [--skip-nbval]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib
import json
import math
import os
import platform
import subprocess
import sys
import time
import tomllib
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential
from torch.utils.data import DataLoader

from helpers import data, memory, models, spies, timing
from helpers.device import seed_everything, synchronize

REPO_ROOT = Path(__file__).resolve().parent.parent
NO_GPU_LINE = "no CUDA GPU: the GPU check ran its self-test only"
LESSONS = ("01_mixed_precision", "02_gradient_accumulation", "03_profiling", "04_memory")


@dataclass(frozen=True)
class Scale:
    """Workload sizes: REAL follows the notebooks' real sizes, TINY only proves the code runs."""

    name: str
    warmup: int
    repeats: int
    # Lesson 1: the notebook's benchmark MLP (cell 54) and a Transformer LM.
    mlp_features: int
    mlp_batch: int
    lm_vocab: int
    lm_d_model: int
    lm_heads: int
    lm_layers: int
    lm_length: int
    lm_batch: int
    # Lesson 2: the notebook's MLP (depth 4) and batch.
    accum_features: int
    accum_hidden: int
    accum_batch: int
    # Lesson 3: the notebook's slow loop, a compute loop for host syncs, tiny ops, a copy.
    slow_samples: int
    slow_delay_s: float
    slow_batch: int
    slow_hidden: int
    workers: int
    epoch_warmup: int
    epoch_repeats: int
    sync_features: int
    sync_batch: int
    sync_steps: int
    rows: tuple[int, int]
    copy_shape: tuple[int, ...]
    # Lesson 4: the notebook's ResidualMLP and batch, and a batch where activations dominate.
    mem_dim: int
    mem_depth: int
    mem_batches: tuple[int, ...]


REAL = Scale(
    name="real", warmup=3, repeats=10,
    mlp_features=2048, mlp_batch=1024,
    lm_vocab=16384, lm_d_model=1024, lm_heads=16, lm_layers=8, lm_length=512, lm_batch=8,
    accum_features=1024, accum_hidden=4096, accum_batch=4096,
    slow_samples=320, slow_delay_s=0.003, slow_batch=16, slow_hidden=1024,
    workers=min(4, os.cpu_count() or 1), epoch_warmup=1, epoch_repeats=3,
    sync_features=512, sync_batch=256, sync_steps=50,
    rows=(1024, 256), copy_shape=(64, 3, 224, 224),
    mem_dim=1024, mem_depth=8, mem_batches=(512, 4096),
)
TINY = Scale(
    name="tiny", warmup=1, repeats=2,
    mlp_features=16, mlp_batch=16,
    lm_vocab=32, lm_d_model=16, lm_heads=2, lm_layers=1, lm_length=8, lm_batch=2,
    accum_features=16, accum_hidden=32, accum_batch=32,
    slow_samples=24, slow_delay_s=0.0005, slow_batch=8, slow_hidden=32,
    workers=2, epoch_warmup=0, epoch_repeats=1,
    sync_features=16, sync_batch=8, sync_steps=4,
    rows=(16, 8), copy_shape=(2, 3, 8, 8),
    mem_dim=16, mem_depth=4, mem_batches=(8, 32),
)


# --------------------------------------------------------------------------------------------
# Measuring


def _time(fn: Callable[[], object], device: torch.device, scale: Scale, warmup: int | None = None,
          repeats: int | None = None) -> timing.Timing:
    return timing.benchmark(fn, device=device, warmup=scale.warmup if warmup is None else warmup,
                            repeats=scale.repeats if repeats is None else repeats)


def _peak(fn: Callable[[], object], device: torch.device) -> int | None:
    """Peak bytes allocated while fn() ran (live tensors included); None off CUDA."""
    return memory.cuda_peak_bytes(fn, device)


def _allocated(device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    synchronize(device)
    return torch.cuda.memory_allocated(device)


def _release(device: torch.device) -> None:
    """Free what the last measurement left, so that the next one's peak starts clean (CUDA only)."""
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


def _is_oom(error: BaseException) -> bool:
    return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error)


def _native_bf16(device: torch.device) -> bool:
    if device.type != "cuda":
        return True
    try:
        return torch.cuda.is_bf16_supported(including_emulation=False)
    except TypeError:     # older torch has no including_emulation; bf16 is native from Ampere (8.0) on
        return torch.cuda.get_device_capability(device)[0] >= 8


def _low_precision(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if _native_bf16(device) else torch.float16


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _parameters_text(model: nn.Module) -> str:
    count = models.count_parameters(model)
    return f"{count / 1e6:.1f} M parameters" if count >= 100_000 else f"{count:,} parameters"


# Lesson 1 ------------------------------------------------------------------------------------

def _precision_row(device: torch.device, scale: Scale, build: Callable[[], nn.Module],
                   loss_of: Callable[[nn.Module], torch.Tensor], amp_dtype: torch.dtype | None,
                   precision: str) -> dict:
    """Time and peak memory of one training step with autocast to amp_dtype (None: off)."""
    model = build().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype is torch.float16)

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            loss = loss_of(model)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss

    row = {"parameters": models.count_parameters(model)}
    previous_precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        result = _time(step, device, scale)
        row.update(step_s=result.median_s, step_times_s=list(result.times_s), peak_bytes=_peak(step, device),
                   loss_finite=bool(torch.isfinite(step()).item()))
    except RuntimeError as error:
        if not _is_oom(error):
            raise
        row["note"] = "out of memory"
    finally:
        torch.set_float32_matmul_precision(previous_precision)
    return row


def measure_mixed_precision(device: torch.device, scale: Scale) -> dict:
    """Time per training step and peak memory for fp32, TF32, bf16 autocast, fp16 autocast + GradScaler."""
    features = scale.mlp_features
    mlp_x, mlp_y = data.make_blobs(scale.mlp_batch, features, 8, seed=6)
    mlp_x, mlp_y = mlp_x.to(device), mlp_y.to(device)
    generator = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, scale.lm_vocab, (scale.lm_batch, scale.lm_length + 1), generator=generator)
    lm_inputs, lm_targets = tokens[:, :-1].to(device), tokens[:, 1:].to(device)

    workloads = {
        f"MLP {features}-{4 * features}x3-8, batch {scale.mlp_batch}": (
            lambda: models.MLP(features, 4 * features, 8, depth=3, seed=8),
            lambda model: F.cross_entropy(model(mlp_x), mlp_y)),
        (f"TinyLM d={scale.lm_d_model}, {scale.lm_layers} layers, vocab {scale.lm_vocab}, "
         f"batch {scale.lm_batch}x{scale.lm_length} tokens"): (
            lambda: models.TinyLM(scale.lm_vocab, scale.lm_d_model, scale.lm_heads, scale.lm_layers,
                                  max_length=scale.lm_length, seed=9),
            lambda model: F.cross_entropy(model(lm_inputs).flatten(0, 1), lm_targets.flatten())),
    }
    settings = (("fp32", None, "highest"), ("tf32", None, "high"),
                ("bf16 autocast", torch.bfloat16, "highest"),
                ("fp16 autocast + GradScaler", torch.float16, "highest"))
    rows, notes = [], []
    for workload, (build, loss_of) in workloads.items():
        baseline_s = None
        for setting, amp_dtype, precision in settings:
            row = {"model": workload, "setting": setting}
            if amp_dtype is torch.bfloat16 and not _native_bf16(device):
                row["note"] = "bf16 is not native on this GPU: skipped"
            else:
                row.update(_precision_row(device, scale, build, loss_of, amp_dtype, precision))
                _release(device)
            rows.append(row)
            if setting == "fp32":
                baseline_s = row.get("step_s")
            if baseline_s and row.get("step_s"):
                row["speedup_vs_fp32"] = baseline_s / row["step_s"]
    if device.type != "cuda":
        notes.append("On a CPU, TF32 changes nothing and 16-bit speed depends on the chip; these "
                     "numbers only prove that the code runs.")
    return {
        "title": "Lesson 1 · Mixed precision",
        "setup": (f"One training step (zero_grad, forward under autocast, scaled backward, SGD step); "
                  f"warm-up {scale.warmup}, median of {scale.repeats}; peak = max_memory_allocated over "
                  "one step after reset_peak_memory_stats (parameters and live tensors included)."),
        "tables": [{
            "caption": "Time per training step and peak memory by precision",
            "columns": [("model", "model", "text"), ("setting", "setting", "text"),
                        ("step_s", "ms / step", "ms"), ("speedup_vs_fp32", "speed-up vs fp32", "x"),
                        ("peak_bytes", "peak CUDA memory", "bytes"), ("note", "note", "text")],
            "rows": rows,
        }],
        "notes": notes,
    }


# Lesson 2 ------------------------------------------------------------------------------------

def measure_accumulation(device: torch.device, scale: Scale) -> dict:
    """Activation and peak memory, and time per optimizer update, against accumulation steps."""
    batch = scale.accum_batch
    model = models.MLP(scale.accum_features, scale.accum_hidden, 8, depth=4, seed=2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = data.make_blobs(batch, scale.accum_features, 8, seed=1)
    x, y = x.to(device), y.to(device)
    rows = []
    for steps in (1, 2, 4, 8):
        parts = data.split_micro_batches(x, y, batch // steps)

        def update(parts=parts, steps=steps):
            for part_x, part_y in parts:
                (F.cross_entropy(model(part_x), part_y) / steps).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        with memory.SavedTensorMeter(model) as meter:
            model(parts[0][0])
        result = _time(update, device, scale)
        resting = _allocated(device)
        peak = _peak(update, device)
        rows.append({"accum_steps": steps, "micro_batch": batch // steps, "effective_batch": batch,
                     "saved_bytes": meter.bytes, "peak_bytes": peak,
                     "peak_above_resting_bytes": None if peak is None else peak - resting,
                     "update_s": result.median_s, "update_times_s": list(result.times_s)})
    for row in rows:
        row["time_vs_1"] = row["update_s"] / rows[0]["update_s"]
    description = (f"MLP {scale.accum_features}-{scale.accum_hidden}x4-8 ({_parameters_text(model)}), SGD, "
                   f"effective batch {batch}")
    return {
        "title": "Lesson 2 · Gradient accumulation",
        "setup": (f"{description}. One optimizer update = accum_steps forward/backward passes of "
                  f"loss / accum_steps, one step, zero_grad; warm-up {scale.warmup}, median of "
                  f"{scale.repeats}. Saved activations: the saved-tensor meter over one micro-batch's "
                  "forward (exact); peak above resting: the update's peak minus what was allocated "
                  "before it (parameters and data)."),
        "tables": [{
            "caption": "Memory and time per update against accumulation steps, same effective batch",
            "columns": [("accum_steps", "accum_steps", "int"), ("micro_batch", "micro-batch", "int"),
                        ("saved_bytes", "saved activations", "bytes"),
                        ("peak_bytes", "peak CUDA memory", "bytes"),
                        ("peak_above_resting_bytes", "peak above resting", "bytes"),
                        ("update_s", "ms / update", "ms"), ("time_vs_1", "time vs accum_steps=1", "x")],
            "rows": rows,
        }],
        "notes": [],
    }


# Lesson 3 ------------------------------------------------------------------------------------

def _epoch(model: nn.Module, optimizer, dataset, batch_size: int, workers: int,
           sync_every_step: bool) -> float:
    """The lesson's training loop: slow_epoch with workers=0 and sync_every_step, fast_epoch without."""
    model_device = next(model.parameters()).device
    pinned = workers > 0 and model_device.type == "cuda"
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers, pin_memory=pinned)
    total = 0.0 if sync_every_step else torch.zeros((), device=model_device)
    steps = 0
    for x, y in loader:
        x, y = x.to(model_device, non_blocking=pinned), y.to(model_device, non_blocking=pinned)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() if sync_every_step else loss.detach()
        steps += 1
    return float(total) / steps


def measure_profiling(device: torch.device, scale: Scale) -> dict:
    """Step time before and after each fix of lesson 3: workers and pinned memory, no per-step
    .item(), batched operations, pinned copies."""
    tables, notes = [], []
    # The lesson's workers mostly sleep (simulated decoding): more workers than cores is fine.
    warnings.filterwarnings("ignore", message="This DataLoader will create")

    # 1. The slow loop and its fixes.
    dataset = data.SlowDataset(scale.slow_samples, 32, num_classes=10, delay_s=scale.slow_delay_s, seed=3)
    steps = math.ceil(scale.slow_samples / scale.slow_batch)
    variants = (("baseline: main-process loading, loss.item() every step", 0, True),
                (f"+ {scale.workers} DataLoader workers (pin_memory, non_blocking on CUDA)",
                 scale.workers, True),
                ("+ running loss kept on the device (fast_epoch)", scale.workers, False))
    rows = []
    for label, workers, sync in variants:
        model = models.MLP(32, scale.slow_hidden, 10, depth=2, seed=4).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

        def epoch(model=model, optimizer=optimizer, workers=workers, sync=sync):
            return _epoch(model, optimizer, dataset, scale.slow_batch, workers, sync)

        result = _time(epoch, device, scale, warmup=scale.epoch_warmup, repeats=scale.epoch_repeats)
        with spies.record_loaders() as loaders, spies.record_host_syncs() as syncs:
            epoch()
        rows.append({"loop": label, "step_s": result.median_s / steps, "epoch_s": result.median_s,
                     "epoch_times_s": list(result.times_s), "data_wait_s": loaders.wait_s / steps,
                     "host_syncs": syncs.total})
    for row in rows:
        row["speedup_vs_baseline"] = rows[0]["step_s"] / row["step_s"]
    tables.append({
        "caption": (f"The slow loop: SlowDataset of {scale.slow_samples} samples at "
                    f"{scale.slow_delay_s * 1e3:g} ms each, batch {scale.slow_batch} ({steps} steps), "
                    f"MLP 32-{scale.slow_hidden}x2-10; time per step = epoch time / steps "
                    f"(median of {scale.epoch_repeats} epochs, worker start-up included)"),
        "columns": [("loop", "loop", "text"), ("step_s", "ms / step", "ms"),
                    ("speedup_vs_baseline", "speed-up", "x"),
                    ("data_wait_s", "waiting for data, ms / step", "ms"),
                    ("host_syncs", "host syncs / epoch", "int")],
        "rows": rows,
    })

    # 2. The per-step host sync alone, in a loop with no data loading.
    features = scale.sync_features
    model = models.MLP(features, 4 * features, 10, depth=4, seed=5).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = data.make_blobs(scale.sync_batch, features, 10, seed=6)
    x, y = x.to(device), y.to(device)

    def train(read_every_step: bool) -> float:
        total = torch.zeros((), device=device)
        for _ in range(scale.sync_steps):
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            if read_every_step:
                loss.item()                     # logging: waits for the GPU every step
            total += loss.detach()
        return total.item()

    sync_rows = []
    for label, every in (("loss.item() every step", True), ("running total on the device, read once", False)):
        result = _time(lambda every=every: train(every), device, scale)
        sync_rows.append({"loop": label, "step_s": result.median_s / scale.sync_steps,
                          "loop_times_s": list(result.times_s)})
    sync_rows[1]["speedup_vs_baseline"] = sync_rows[0]["step_s"] / sync_rows[1]["step_s"]
    tables.append({
        "caption": (f"A host sync per step: MLP {features}-{4 * features}x4-10, batch {scale.sync_batch}, "
                    f"{scale.sync_steps} steps per timed loop, data already on the device"),
        "columns": [("loop", "loop", "text"), ("step_s", "ms / step", "ms"),
                    ("speedup_vs_baseline", "speed-up", "x")],
        "rows": sync_rows,
    })

    # 3. Many tiny operations against one batched call.
    rows_tensor = torch.randn(*scale.rows, device=device)
    ops = {"one call per row": lambda: torch.stack([row / row.norm() for row in rows_tensor]),
           "one batched call": lambda: rows_tensor / rows_tensor.norm(dim=1, keepdim=True)}
    op_rows = [{"version": name, "call_s": _time(fn, device, scale).median_s} for name, fn in ops.items()]
    op_rows[1]["speedup_vs_baseline"] = op_rows[0]["call_s"] / op_rows[1]["call_s"]
    tables.append({
        "caption": f"Normalising each row of a {scale.rows[0]}x{scale.rows[1]} tensor",
        "columns": [("version", "version", "text"), ("call_s", "ms / call", "ms"),
                    ("speedup_vs_baseline", "speed-up", "x")],
        "rows": op_rows,
    })

    # 4. Pageable against pinned host-to-device copies.
    host = torch.randn(*scale.copy_shape)
    copy_rows = []
    if device.type == "cuda":
        pinned = host.pin_memory()
        for label, copy in (("pageable, blocking", lambda: host.to(device)),
                            ("pinned, non_blocking", lambda: pinned.to(device, non_blocking=True))):
            seconds = _time(copy, device, scale).median_s
            copy_rows.append({"copy": label, "copy_s": seconds,
                              "gib_per_s": memory.tensor_bytes(host) / seconds / 2**30})
        copy_rows[1]["speedup_vs_baseline"] = copy_rows[0]["copy_s"] / copy_rows[1]["copy_s"]
    else:
        notes.append("Host-to-device copies (pageable against pinned) need a CUDA GPU: not measured.")
    tables.append({
        "caption": f"Copying a float32 batch of shape {list(scale.copy_shape)} "
                   f"({memory.format_bytes(memory.tensor_bytes(host))}) to the GPU",
        "columns": [("copy", "copy", "text"), ("copy_s", "ms / copy", "ms"), ("gib_per_s", "GiB/s", "float"),
                    ("speedup_vs_baseline", "speed-up", "x")],
        "rows": copy_rows,
    })
    return {
        "title": "Lesson 3 · Profiling the bottleneck",
        "setup": (f"Each fix of the lesson measured before and after on the same model and data; "
                  f"warm-up {scale.warmup}, synchronised, median of {scale.repeats} unless a table says "
                  "otherwise."),
        "tables": tables,
        "notes": notes,
    }


# Lesson 4 ------------------------------------------------------------------------------------

def _memory_techniques(device: torch.device) -> list[tuple[str, dict]]:
    low = _dtype_name(_low_precision(device))
    return [
        ("baseline: Adam, fp32, full batch", {}),
        ("checkpoint every block (use_reentrant=False)", {"checkpointing": "block"}),
        ("checkpoint_sequential, sqrt(depth) segments", {"checkpointing": "sqrt"}),
        ("micro-batch / 4, accumulated", {"micro": 4}),
        (f"{low} autocast", {"amp": _low_precision(device)}),
        ("zero_grad(set_to_none=False)", {"set_to_none": False}),
        ("SGD instead of Adam", {"optimizer": "sgd"}),
        ("Adam(foreach=False)", {"optimizer": "adam_for_loop"}),
    ]


def _memory_forward(model: models.ResidualMLP, h: torch.Tensor, mode: str | None) -> torch.Tensor:
    if mode == "block":
        for block in model.blocks:
            h = checkpoint(block, h, use_reentrant=False)
        return h
    if mode == "sqrt":
        return checkpoint_sequential(nn.Sequential(*model.blocks), math.isqrt(len(model.blocks)), h,
                                     use_reentrant=False)
    return model(h)


def _technique_row(device: torch.device, scale: Scale, x: torch.Tensor, optimizer: str = "adam",
                   micro: int = 1, amp: torch.dtype | None = None, checkpointing: str | None = None,
                   set_to_none: bool = True) -> dict:
    """Saved activations, step time, memory between steps and peak of one technique, fresh model."""
    model = models.ResidualMLP(scale.mem_dim, 4 * scale.mem_dim, scale.mem_depth, seed=1).to(device)
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    else:
        foreach = False if optimizer == "adam_for_loop" else None     # None: torch's default
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=foreach)

    def autocast():
        return torch.autocast(device.type, dtype=amp or torch.float32, enabled=amp is not None)

    def step() -> None:
        for part in x.chunk(micro):
            with autocast():
                loss = _memory_forward(model, part, checkpointing).float().pow(2).mean() / micro
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)

    row = {}
    try:
        with memory.SavedTensorMeter(model) as meter, autocast():
            _memory_forward(model, x.chunk(micro)[0], checkpointing)
        row["saved_bytes"] = meter.bytes
        result = _time(step, device, scale)
        row.update(step_s=result.median_s, step_times_s=list(result.times_s),
                   between_steps_bytes=_allocated(device), peak_bytes=_peak(step, device),
                   parameter_bytes=memory.parameter_bytes(model),
                   optimizer_state_bytes=memory.optimizer_state_bytes(opt))
    except RuntimeError as error:
        if not _is_oom(error):
            raise
        row["note"] = "out of memory"
    return row


def measure_memory(device: torch.device, scale: Scale) -> dict:
    """Peak memory, memory between steps, saved activations and step time by technique."""
    tables = []
    for batch in scale.mem_batches:
        x = torch.randn(batch, scale.mem_dim, device=device)
        rows = []
        for label, options in _memory_techniques(device):
            rows.append({"technique": label, **_technique_row(device, scale, x, **options)})
            _release(device)
        baseline = rows[0]
        for row in rows:
            if row.get("peak_bytes") and baseline.get("peak_bytes"):
                row["peak_vs_baseline"] = row["peak_bytes"] / baseline["peak_bytes"]
            if row.get("step_s") and baseline.get("step_s"):
                row["time_vs_baseline"] = row["step_s"] / baseline["step_s"]
        tables.append({
            "caption": (f"ResidualMLP dim {scale.mem_dim}, hidden {4 * scale.mem_dim}, depth "
                        f"{scale.mem_depth}, batch {batch}"),
            "columns": [("technique", "technique", "text"), ("peak_bytes", "peak CUDA memory", "bytes"),
                        ("peak_vs_baseline", "peak vs baseline", "x"),
                        ("between_steps_bytes", "allocated between steps", "bytes"),
                        ("saved_bytes", "saved activations", "bytes"), ("step_s", "ms / step", "ms"),
                        ("time_vs_baseline", "time vs baseline", "x"), ("note", "note", "text")],
            "rows": rows,
        })
    return {
        "title": "Lesson 4 · Reducing GPU memory",
        "setup": (f"One training step (forward, backward, optimizer step, zero_grad at its end) per "
                  f"technique on a fresh model; warm-up {scale.warmup}, median of {scale.repeats}. Peak: "
                  "max_memory_allocated over one step after reset_peak_memory_stats; allocated between "
                  "steps: memory_allocated after a step (parameters, optimizer state, and gradients "
                  "unless set_to_none); saved activations: the saved-tensor meter over one (micro-)batch's "
                  "forward (exact, any device)."),
        "tables": tables,
        "notes": [],
    }


MEASUREMENTS: dict[str, Callable[[torch.device, Scale], dict]] = {
    "01_mixed_precision": measure_mixed_precision,
    "02_gradient_accumulation": measure_accumulation,
    "03_profiling": measure_profiling,
    "04_memory": measure_memory,
}


# --------------------------------------------------------------------------------------------
# nbval


def parse_junit(path: Path) -> dict:
    """Totals, per-notebook counts and failures from pytest's JUnit XML of an nbval run."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    totals = {"tests": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    notebooks: dict[str, dict[str, int]] = {}
    failures = []
    for suite in suites:
        for case in suite.iter("testcase"):
            name = case.get("classname", "")
            outcome = ("failed" if case.find("failure") is not None
                       else "errors" if case.find("error") is not None
                       else "skipped" if case.find("skipped") is not None else "passed")
            counts = notebooks.setdefault(name, {"passed": 0, "failed": 0, "errors": 0, "skipped": 0})
            counts[outcome] += 1
            totals["tests"] += 1
            totals[outcome] += 1
            problem = case.find("failure") if outcome == "failed" else case.find("error")
            if problem is not None:
                message = (problem.get("message") or problem.text or "").strip()
                failures.append({"notebook": name, "cell": case.get("name", ""), "outcome": outcome,
                                 "message": message[:600]})
    return {"totals": totals, "notebooks": notebooks, "failures": failures}


def _importable_category(entry: str) -> bool:
    """Whether the warning class of a filterwarnings entry ("action:message:category:...") imports."""
    parts = entry.split(":")
    category = parts[2].strip() if len(parts) > 2 else ""
    if "." not in category:
        return True          # empty, or a builtin such as DeprecationWarning
    module, _, name = category.rpartition(".")
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


def warning_filter_override(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[str]:
    """pytest options that keep pyproject's filterwarnings minus the entries whose warning class is
    not installed here (sqlalchemy's, which only nbgrader brings): pytest 8 stops with an error on
    those, and a warning from a package that is not installed cannot be raised anyway."""
    config = tomllib.loads(pyproject.read_text())
    filters = config.get("tool", {}).get("pytest", {}).get("ini_options", {}).get("filterwarnings", [])
    usable = [entry for entry in filters if _importable_category(entry)]
    return [] if usable == filters else ["-o", "filterwarnings=" + "\n".join(usable)]


def run_nbval(out_dir: Path, timeout_s: int) -> dict:
    """pytest over notebooks/ with the repository's config (--nbval-lax ...), in this interpreter."""
    junit, log = out_dir / "nbval-junit.xml", out_dir / "nbval.log"
    command = [sys.executable, "-m", "pytest", "notebooks", "-q", f"--junitxml={junit}",
               *warning_filter_override()]
    env = dict(os.environ)
    env.pop("NBGRADER_EXECUTION", None)          # the notebooks would shrink to their grading size
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    started = time.perf_counter()
    try:
        completed = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                                   timeout=timeout_s)
        output, returncode = completed.stdout + completed.stderr, completed.returncode
    except subprocess.TimeoutExpired as expired:
        output = expired.stdout or ""
        output = output.decode(errors="replace") if isinstance(output, bytes) else output
        output += f"\n(nbval stopped after {timeout_s} s)"
        returncode = None
    log.write_text(output)
    shown = ["python"] + [arg if "\n" not in arg else repr(arg) for arg in command[1:]]
    result = {"command": " ".join(shown), "returncode": returncode,
              "duration_s": time.perf_counter() - started, "log": log.name,
              "summary": next((line for line in reversed(output.splitlines()) if line.strip()), "")}
    if junit.exists():
        result.update(parse_junit(junit))
        result["junit"] = junit.name
    return result


# --------------------------------------------------------------------------------------------
# The report


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def machine_info(device: torch.device) -> dict:
    info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "platform": platform.platform(), "cpu_count": os.cpu_count(), "commit": _git_commit(),
            "device": "cpu"}
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        info.update(device=torch.cuda.get_device_name(device),
                    capability=".".join(map(str, torch.cuda.get_device_capability(device))),
                    gpu_memory_bytes=properties.total_memory,
                    cudnn=torch.backends.cudnn.version(), bf16_native=_native_bf16(device))
    return info


def _format(value, kind: str) -> str:
    if value is None or value == "":
        return "" if kind == "text" else "–"
    if kind == "ms":
        return f"{value * 1e3:.3g}" if value * 1e3 < 100 else f"{value * 1e3:.0f}"
    if kind == "bytes":
        return memory.format_bytes(value)
    if kind == "x":
        return f"{value:.2f}x"
    if kind == "int":
        return str(int(value))
    if kind == "float":
        return f"{value:.3g}"
    return str(value).replace("|", "\\|")


def _markdown_table(table: dict) -> list[str]:
    columns = table["columns"]
    if not table["rows"]:
        return [f"*{table['caption']}*: not measured on this machine.", ""]
    lines = [f"*{table['caption']}*", "", "| " + " | ".join(header for _, header, _ in columns) + " |",
             "| " + " | ".join("---" for _ in columns) + " |"]
    for row in table["rows"]:
        lines.append("| " + " | ".join(_format(row.get(key), kind) for key, _, kind in columns) + " |")
    return lines + [""]


def render_markdown(report: dict) -> str:
    machine = report["machine"]
    self_test = report["mode"] == "cpu-self-test"
    lines = ["# GPU check report", ""]
    if self_test:
        lines += [f"**CPU self-test.** {report['reason']}. Every measurement below ran at a tiny size on "
                  "the CPU to prove the code paths; these are not the course's figures.", ""]
    else:
        lines += [f"**GPU check on {machine['device']}** (compute capability {machine.get('capability')}, "
                  f"{machine.get('gpu_memory_bytes', 0) / 2**30:.0f} GiB).", ""]
    nbval = report.get("nbval")
    failed = [lesson for lesson, section in report["lessons"].items() if "error" in section]
    result = f"figures: {len(report['lessons']) - len(failed)} of {len(LESSONS)} lessons measured"
    result += f" ({', '.join(failed)} failed)" if failed else ""
    if nbval and "returncode" in nbval:
        result += f"; nbval: {'passed' if nbval['returncode'] == 0 else 'FAILED'} ({nbval['summary']})"
    lines += [f"- result: {result}",
              f"- written {report['written']} by `python -m course_tools.gpu_check`, commit "
              f"{machine.get('commit') or 'unknown'}",
              f"- torch {machine['torch']} (CUDA {machine['cuda'] or 'none'}), Python {machine['python']}, "
              f"{machine['platform']}, {machine['cpu_count']} CPU cores", ""]
    lines += ["## nbval over notebooks/", ""]
    if nbval is None:
        lines += ["Not run yet: it runs after the figures.", ""]
    elif "skipped" in nbval:
        lines += [f"Not run: {nbval['skipped']}.", ""]
    else:
        totals = nbval.get("totals")
        verdict = "passed" if nbval["returncode"] == 0 else "FAILED"
        lines += [f"`{nbval['command']}`: **{verdict}** in {nbval['duration_s']:.0f} s "
                  f"(exit code {nbval['returncode']}); pytest says: {nbval['summary']}", ""]
        if totals:
            lines += ["| notebook | passed | failed | errors | skipped |", "| --- | --- | --- | --- | --- |"]
            for name, counts in nbval["notebooks"].items():
                lines.append(f"| `{name}` | {counts['passed']} | {counts['failed']} | {counts['errors']} | "
                             f"{counts['skipped']} |")
            lines.append(f"| **all** | {totals['passed']} | {totals['failed']} | {totals['errors']} | "
                         f"{totals['skipped']} |")
            lines.append("")
        for failure in nbval.get("failures", []):
            message = " ".join(failure["message"].split())[:300]
            lines.append(f"- {failure['outcome']}: `{failure['notebook']}` {failure['cell']}: {message}")
        lines += ["", f"Full output: `{nbval['log']}`.", ""]
    for lesson in LESSONS:
        section = report["lessons"].get(lesson)
        if section is None:
            continue
        lines += [f"## {lesson}: {section.get('title', '')}", ""]
        if "error" in section:
            lines += [f"**Measurement failed:** `{section['error']}`", ""]
            continue
        lines += [section["setup"], ""]
        for table in section["tables"]:
            lines += _markdown_table(table)
        lines += [f"- {note}" for note in section["notes"]] + ([""] if section["notes"] else [])
    return "\n".join(lines).rstrip() + "\n"


def write_report(report: dict, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    path = out_dir / "report.md"
    path.write_text(render_markdown(report))
    return path


# --------------------------------------------------------------------------------------------


def _console_summary(lesson: str, section: dict) -> str:
    if "error" in section:
        return f"{lesson}: FAILED ({section['error']})"
    numbers = [row for table in section["tables"] for row in table["rows"]]
    return f"{lesson}: {len(numbers)} rows measured"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "gpu-report", help="report folder")
    parser.add_argument("--self-test", action="store_true", help="the tiny CPU run, even on a GPU machine")
    parser.add_argument("--skip-nbval", action="store_true", help="measure the figures only")
    parser.add_argument("--nbval-timeout", type=int, default=1800, help="seconds for the whole nbval run")
    args = parser.parse_args(argv)

    has_cuda = torch.cuda.is_available()
    if not has_cuda:
        print(NO_GPU_LINE, flush=True)
        reason = "No CUDA GPU was found (torch.cuda.is_available() is False)"
    elif args.self_test:
        print("--self-test: the GPU check ran its CPU self-test only", flush=True)
        reason = "The CPU self-test was asked for (--self-test)"
    self_test = args.self_test or not has_cuda
    device = torch.device("cpu") if self_test else torch.device("cuda")
    scale = TINY if self_test else REAL
    if self_test:
        # Tiny tensors gain nothing from threads, and on a busy CI machine spinning OpenMP threads
        # turn microseconds into tenths of a second.
        torch.set_num_threads(1)
    report = {"mode": "cpu-self-test" if self_test else "gpu", "scale": scale.name,
              "written": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
              "machine": machine_info(device), "lessons": {}, "nbval": None}
    if self_test:
        report["reason"] = reason
        report["nbval"] = {"skipped": "a CPU self-test runs no notebooks (make test runs nbval on the CPU)"}
    elif args.skip_nbval:
        report["nbval"] = {"skipped": "--skip-nbval"}
    out_dir = args.out.resolve()
    failed = False
    for lesson, measure in MEASUREMENTS.items():
        seed_everything(0)
        started = time.perf_counter()
        try:
            section = measure(device, scale)
        except Exception as error:      # one lesson's failure must not hide the others' numbers
            section = {"title": "", "error": f"{type(error).__name__}: {error}"}
            failed = True
        section["duration_s"] = time.perf_counter() - started
        report["lessons"][lesson] = section
        write_report(report, out_dir)
        print(_console_summary(lesson, section), f"({section['duration_s']:.1f} s)", flush=True)
    if report["nbval"] is None:
        print("nbval over notebooks/ on the GPU ...", flush=True)
        report["nbval"] = run_nbval(out_dir, args.nbval_timeout)
        failed = failed or report["nbval"]["returncode"] != 0
        print(f"nbval: {report['nbval']['summary']}", flush=True)
    path = write_report(report, out_dir)
    print(f"report: {path} (raw numbers: {path.with_suffix('.json')})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
