"""Unit tests of helpers.device."""

import random

import pytest
import torch

from helpers import device as dev


@pytest.fixture
def not_grading(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)


def test_pick_device_prefers_cuda_then_mps(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert dev.pick_device() == torch.device("cpu")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert dev.pick_device() == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert dev.pick_device() == torch.device("cuda")


def test_low_precision_dtype(monkeypatch):
    assert dev.low_precision_dtype("cpu") is torch.bfloat16
    assert dev.low_precision_dtype(torch.device("mps")) is torch.float16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert dev.low_precision_dtype("cuda") is torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert dev.low_precision_dtype("cuda:0") is torch.float16


def test_low_precision_dtype_rejects_bad_devices():
    with pytest.raises(ValueError, match="not a device name"):
        dev.low_precision_dtype("gpu please")
    with pytest.raises(TypeError, match="torch.device or a str"):
        dev.low_precision_dtype(0)


def test_synchronize(monkeypatch):
    dev.synchronize("cpu")
    dev.synchronize(torch.device("cpu"))
    seen = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: seen.append(device))
    dev.synchronize("cuda")
    assert seen == [torch.device("cuda")]


@pytest.mark.parametrize(("mode", "expected"), [
    ("autograde", True), ("validate", True), ("generate_feedback", False), ("", False),
])
def test_is_grading(monkeypatch, mode, expected):
    monkeypatch.setenv("NBGRADER_EXECUTION", mode)
    assert dev.is_grading() is expected


def test_is_grading_without_variable(not_grading):
    assert dev.is_grading() is False


def test_workload_size(monkeypatch, not_grading):
    assert dev.use_real_size("cpu") is False
    assert dev.use_real_size("mps") is False
    assert dev.use_real_size("cuda") is True
    assert dev.by_size(1, 100, "cuda") == 100
    assert dev.by_size(1, 100, torch.device("cpu")) == 1
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert dev.use_real_size("cuda") is False
    assert dev.by_size("small", "real", "cuda") == "small"


def test_seed_everything_makes_runs_repeat():
    dev.seed_everything(123)
    first = (torch.rand(3), random.random())
    dev.seed_everything(123)
    second = (torch.rand(3), random.random())
    assert torch.equal(first[0], second[0]) and first[1] == second[1]
    with pytest.raises(TypeError, match="seed must be an int"):
        dev.seed_everything(1.5)


def test_describe(monkeypatch, not_grading):
    assert dev.describe("cpu") == "cpu · low precision: bfloat16 · workload: small (CPU)"
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert dev.describe("cuda") == (
        "cuda (NVIDIA H200) · low precision: bfloat16 · workload: real"
    )
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    assert dev.describe("cuda").endswith("workload: small (grading)")
    assert dev.describe("cpu").endswith("workload: small (grading)")


def test_cpu_bf16_support_names_the_instructions(monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert dev.cpu_bf16_support() == "CPU vector level AVX512; bf16 instructions: AVX-512 BF16"
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    assert "no bf16 instructions" in dev.cpu_bf16_support()
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)
    assert "emulated" in dev.cpu_bf16_support()       # a torch without the probe: none found
