"""Exercise 2 of lesson 04: the bytes a model's forward saves for backward.

check_saved_bytes compares the student's predict_saved_bytes with what the saved-tensor meter counts
(measure_saved_bytes) and names the mistake whose size is exactly the gap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from helpers.collect.memory import collect_saved_bytes
from helpers.diagnosis import mistake
from helpers.memory import SavedTensorMeter
from helpers.transport import errors, remote

# ---------------------------------------------------------------- Exercise 2: predict the activations

def _input_width(model: nn.Sequential) -> int:
    first = model[0]
    return first.in_features if isinstance(first, nn.Linear) else first.normalized_shape[0]


def measure_saved_bytes(model: nn.Sequential, batch_size: int) -> int:
    """Bytes the saved-tensor meter counts for model(x), x float32 [batch_size, in_features], on a CPU."""
    with SavedTensorMeter(model) as meter:
        model(torch.randn(batch_size, _input_width(model)))
    return meter.bytes


def _layer_inputs(model: nn.Sequential, batch_size: int) -> list[int]:
    """The bytes of the float32 tensor entering each layer, and of the model's output, last."""
    width, sizes = _input_width(model), []
    for layer in model:
        sizes.append(batch_size * width * 4)
        width = layer.out_features if isinstance(layer, nn.Linear) else width
    return sizes + [batch_size * width * 4]


def _saved_hint(model: nn.Sequential, batch_size: int, gap: int) -> tuple[str, str]:
    """The one mistake whose size is exactly `gap` (predicted minus measured), as (its name, what to add
    to the message), or ("wrong_prediction", "")."""
    layers, sizes = list(model), _layer_inputs(model, batch_size)
    saves_its_input = (nn.Linear, nn.GELU, nn.LayerNorm)
    shared = sum(sizes[i + 1] for i, layer in enumerate(layers[:-1])
                 if isinstance(layer, nn.ReLU) and isinstance(layers[i + 1], saves_its_input))
    candidates = [
        (sum(m.weight.numel() * 4 for m in layers if isinstance(m, nn.Linear)), "parameters_counted",
         ": parameters are not activations; Linear keeps a reference to its weight, "
         "which costs nothing extra"),
        (shared, "shared_tensor_counted_twice",
         ": the ReLU's output and the next layer's input are one tensor, count it once"),
        (-sum(sizes[i] for i, m in enumerate(layers) if isinstance(m, nn.Dropout)), "dropout_mask_missed",
         ": Dropout keeps its mask, a float32 tensor of its input's shape on a CPU"),
        (-sum(2 * batch_size * 4 for m in layers if isinstance(m, nn.LayerNorm)), "layernorm_stats_missed",
         ": LayerNorm also keeps a float32 mean and inverse standard deviation per row"),
    ]
    causes = [(name, hint) for size, name, hint in candidates if size == gap and size != 0]
    return causes[0] if len(causes) == 1 else ("wrong_prediction", "")   # two causes of one size: neither


def _describe(model: nn.Sequential) -> str:
    return ", ".join(type(m).__name__ for m in model)


def check_saved_bytes(predict: Callable, models: Iterable[nn.Sequential], batch_sizes: Iterable[int]) -> None:
    """predict(model, batch) must equal measure_saved_bytes(model, batch) for every model and batch."""
    batch_sizes = list(batch_sizes)
    for model in models:
        for batch_size in batch_sizes:
            # The reference is measured after the call: in the student's own process nothing on the
            # call stack holds it while their code runs.
            outcome = remote.run_student(predict, collect_saved_bytes, model, batch_size)
            want = measure_saved_bytes(model, batch_size)
            error = remote.raised_of(outcome)
            if error is not None:
                hint, cause = "", ""
                if error.type == "AttributeError" and "features" in error.message:
                    hint = ("only Linear has in_features and out_features: ReLU, GELU and Dropout keep "
                            "the width, and a LayerNorm's is layer.normalized_shape[0]")
                    cause = "width_of_non_linear_layer"
                elif error.type == "TypeError" and "tuple" in error.message:
                    hint = "a LayerNorm's normalized_shape is a tuple: its width is layer.normalized_shape[0]"
                    cause = "normalized_shape_is_tuple"
                raise errors.failure("predict_saved_bytes", error, advice=hint, cause=cause,
                                 expected="predicts the bytes this model saves for backward")
            got = outcome["value"]
            gap = got - want if isinstance(got, int) and not isinstance(got, bool) else None
            if not (got == want):
                cause, hint = (_saved_hint(model, batch_size, gap) if gap is not None
                               else ("wrong_prediction", ""))
                raise mistake(
                    cause,
                    f"{_describe(model)} at batch {batch_size} saves {want} bytes for backward, "
                    f"you predicted {got}"
                    + hint)
