"""Kubernetes resource quantities, read exactly, and the resource names the bridge counts as GPUs.

Shared by the job request (:mod:`slurm_bridge.rules.podresources`), DRA admission
(:mod:`slurm_bridge.rules.dra.admission`) and node registration, so that what a pod may ask Slurm for as GPUs is
exactly what a registered node offers as them. Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Final

__all__ = ["GPU_RESOURCES", "parse_quantity"]

# Device-plugin GPU resources; both become Slurm's generic gres/gpu.
GPU_RESOURCES: Final = ("nvidia.com/gpu", "amd.com/gpu")

_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>\d+\.?\d*|\.\d+)"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exp>[+-]?\d+)|(?P<dec>[numkMGTPE]))?$",
    re.ASCII,
)
_DECIMAL_SUFFIX: Final[Mapping[str, Fraction]] = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_BINARY_SUFFIX: Final[Mapping[str, int]] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def parse_quantity(value: str | int | float) -> Fraction:
    """A Kubernetes resource quantity, exactly (no float rounding before we round up).

    Raises ValueError for anything the apiserver would not accept as a quantity.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a Kubernetes quantity")
        return Fraction(str(value))
    m = _QUANTITY.fullmatch(value.strip())
    if m is None or len(value.strip()) > 64:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 2, 1.5Gi, 4G, 1e3)")
    q = Fraction(m["num"])
    if m["bin"]:
        q *= _BINARY_SUFFIX[m["bin"]]
    elif m["exp"] is not None:
        exp = int(m["exp"])
        if abs(exp) > 30:  # far beyond any resource; keeps Fraction arithmetic bounded
            raise ValueError(f"{value!r}: exponent out of range")
        q *= Fraction(10) ** exp
    elif m["dec"]:
        q *= _DECIMAL_SUFFIX[m["dec"]]
    return -q if m["sign"] == "-" else q
