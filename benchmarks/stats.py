"""Summary statistics for repeated measurements (pure functions, no I/O).

Every figure the suite reports is a :class:`Summary` of repeated samples:
median plus interquartile range and min/max, so a reader can tell a real
difference from noise.  Ratios compare medians and carry a conservative
range built from the quartiles.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional, Sequence

__all__ = ["Ratio", "Summary", "quantile", "ratio", "summarize"]


def quantile(ordered: Sequence[float], q: float) -> float:
    """Quantile ``q`` of already sorted data, linear interpolation (numpy's default)."""
    if not ordered:
        raise ValueError("quantile of no samples")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} outside [0, 1]")
    from pynumabind.records.values import _quantile  # the package's one interpolation

    return _quantile(ordered, q)


@dataclass(frozen=True)
class Summary:
    """Median and spread of ``n`` samples, in ``unit``."""

    n: int
    median: float
    q1: float
    q3: float
    min: float
    max: float
    mean: float
    stdev: float
    unit: str
    p99: Optional[float] = None

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    def to_dict(self) -> Dict[str, Any]:
        out = asdict(self)
        out["iqr"] = self.iqr
        return out

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Summary:
        fields = {k: data[k] for k in ("n", "median", "q1", "q3", "min", "max", "mean", "stdev")}
        return cls(unit=str(data["unit"]), p99=data.get("p99"), **fields)

    def scaled(self, factor: float, unit: str) -> Summary:
        """The same summary in another unit (``factor`` > 0 keeps the order)."""
        if factor <= 0:
            raise ValueError("scale factor must be positive")
        return Summary(
            n=self.n,
            median=self.median * factor,
            q1=self.q1 * factor,
            q3=self.q3 * factor,
            min=self.min * factor,
            max=self.max * factor,
            mean=self.mean * factor,
            stdev=self.stdev * factor,
            unit=unit,
            p99=None if self.p99 is None else self.p99 * factor,
        )

    def text(self, digits: int = 3) -> str:
        """``median [q1-q3]`` in ``unit``, the form the tables use."""
        return (
            f"{_fmt(self.median, digits)} [{_fmt(self.q1, digits)}–{_fmt(self.q3, digits)}] "
            f"{self.unit}"
        ).strip()


def _fmt(value: float, digits: int) -> str:
    return f"{value:.{digits}g}"


def summarize(samples: Sequence[float], unit: str, *, tail: bool = False) -> Summary:
    """Summarize ``samples``; ``tail`` adds the 99th percentile (for jitter)."""
    values = [float(v) for v in samples]
    if not values:
        raise ValueError("cannot summarize an empty sample")
    if any(math.isnan(v) or math.isinf(v) for v in values):
        raise ValueError("samples must be finite numbers")
    ordered = sorted(values)
    n = len(ordered)
    mean = math.fsum(ordered) / n
    variance = math.fsum((v - mean) ** 2 for v in ordered) / (n - 1) if n > 1 else 0.0
    return Summary(
        n=n,
        median=quantile(ordered, 0.5),
        q1=quantile(ordered, 0.25),
        q3=quantile(ordered, 0.75),
        min=ordered[0],
        max=ordered[-1],
        mean=mean,
        stdev=math.sqrt(variance),
        unit=unit,
        p99=quantile(ordered, 0.99) if tail else None,
    )


@dataclass(frozen=True)
class Ratio:
    """``numerator / denominator`` of two medians, with a quartile-based range.

    ``low``/``high`` pair the favourable and unfavourable quartiles
    (q1/q3 and q3/q1): if that range includes 1.0 the two are not clearly
    different.
    """

    numerator: str
    denominator: str
    value: float
    low: float
    high: float

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @property
    def clear(self) -> bool:
        """True when the quartile range excludes 1.0 (a difference beyond the noise)."""
        return self.low > 1.0 or self.high < 1.0


def ratio(numerator: str, a: Summary, denominator: str, b: Summary) -> Ratio:
    """Ratio of the medians of ``a`` and ``b`` (same unit required)."""
    if a.unit != b.unit:
        raise ValueError(f"cannot divide {a.unit} by {b.unit}")
    if b.median <= 0 or b.q1 <= 0 or b.q3 <= 0:
        raise ValueError("denominator must be positive")
    return Ratio(
        numerator=numerator,
        denominator=denominator,
        value=a.median / b.median,
        low=a.q1 / b.q3,
        high=a.q3 / b.q1,
    )
