"""Spies on DataLoaders: the settings each one's iterator runs with, and how long the loop waited
inside next() for its batches (the data stall)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass
class LoaderLog:
    """What record_loaders saw: each DataLoader's settings and the time spent waiting for batches."""

    settings: list[dict] = field(default_factory=list)
    batches: int = 0
    wait_s: float = 0.0
    waits_s: list[float] = field(default_factory=list)

    def steady_wait_s(self) -> float:
        """Seconds waited for every batch but the first: the first also pays for starting the
        workers, which differs between fork and spawn, not for decoding."""
        return sum(self.waits_s[1:])


@contextlib.contextmanager
def record_loaders(clock: Callable[[], float] | None = None) -> Iterator[LoaderLog]:
    """Record every torch.utils.data.DataLoader iterated while active, with the settings its
    iterator runs with (num_workers, pin_memory, persistent_workers, prefetch_factor, batch_size;
    "shuffle": whether its sampler, or its batch sampler's, is a RandomSampler, as shuffle=True
    makes it; "drop_last": whether it drops a last, shorter batch), read when iteration starts: a
    setting changed after the loader was built counts as it takes effect. Also the seconds the
    consuming loop waited inside next() for a batch (the data stall, as the training loop feels
    it)."""
    import time

    from torch.utils.data import RandomSampler
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    clock = clock or time.perf_counter
    log = LoaderLog()
    original_init = _BaseDataLoaderIter.__init__
    original_next = _BaseDataLoaderIter.__next__

    @functools.wraps(original_init)
    def init(self, loader, *args, **kwargs):
        original_init(self, loader, *args, **kwargs)
        # The loader's own settings as iteration starts (the iterator's _pin_memory is already
        # False without an accelerator, where the lesson still judges what was asked for).
        batch_sampler = getattr(loader, "batch_sampler", None)
        samplers = (getattr(loader, "sampler", None), getattr(batch_sampler, "sampler", None))
        log.settings.append({"num_workers": loader.num_workers, "pin_memory": loader.pin_memory,
                             "persistent_workers": loader.persistent_workers,
                             "prefetch_factor": loader.prefetch_factor, "batch_size": loader.batch_size,
                             "shuffle": any(isinstance(sampler, RandomSampler) for sampler in samplers),
                             "drop_last": bool(getattr(loader, "drop_last", False)
                                               or getattr(batch_sampler, "drop_last", False) is True)})

    @functools.wraps(original_next)
    def next_batch(self):
        started = clock()
        try:
            batch = original_next(self)
        finally:
            waited = clock() - started
            log.wait_s += waited
        # The call that raises StopIteration (and may shut workers down) is no batch.
        log.waits_s.append(waited)
        log.batches += 1
        return batch

    _BaseDataLoaderIter.__init__ = init
    _BaseDataLoaderIter.__next__ = next_batch
    try:
        yield log
    finally:
        _BaseDataLoaderIter.__init__ = original_init
        _BaseDataLoaderIter.__next__ = original_next
