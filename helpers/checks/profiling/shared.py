"""What several of lesson 03's checks share: how the shares are shown in a failure's message."""

from __future__ import annotations

from collections.abc import Mapping


def _rounded(shares: Mapping[str, float]) -> dict[str, float]:
    return {phase: round(share, 3) for phase, share in shares.items()}
