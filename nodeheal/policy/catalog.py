"""NVIDIA's Xid catalog, as the facts NodeHeal's decisions cite.

The data file (``xid_catalog.csv``, shipped inside the package) records what each Xid means and
what NVIDIA recommends, with the sources checked. It holds facts only: which NodeHeal action an
Xid maps to is policy and lives in :mod:`nodeheal.policy.classify`, so a catalog refresh cannot
silently change what NodeHeal does to a node.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType

CATALOG_RESOURCE = "xid_catalog.csv"

_COLUMNS = (
    "xid",
    "name",
    "meaning",
    "recommended_action",
    "category",
    "nvidia_immediate_bucket",
    "fault_domain",
    "source_url",
)


@dataclass(frozen=True, slots=True)
class XidEntry:
    xid: int
    #: NVIDIA's symbolic name, e.g. ``ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS``.
    name: str
    #: What the error means, in words a person on call can use.
    meaning: str
    #: NVIDIA's immediate and investigatory actions, summarised.
    recommended_action: str
    #: Coarse class used by the policy, e.g. ``GPU_RESET``, ``APP_RESTART_NO_NODE_ACTION``.
    category: str
    #: NVIDIA's immediate-action bucket verbatim, e.g. ``RESET_GPU``, ``RESTART_BM``.
    nvidia_immediate_bucket: str
    #: Where the fault lives, e.g. ``pcie/bus``, ``memory/ECC``, ``nvlink5``.
    fault_domain: str
    #: Where the facts come from (``|``-separated URLs).
    source_url: str


def parse_catalog(text: str) -> Mapping[int, XidEntry]:
    """Parse the catalog CSV; a malformed file is a packaging bug, so fail loudly."""
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) != _COLUMNS:
        raise ValueError(f"Xid catalog columns must be {_COLUMNS}, got {reader.fieldnames}")
    entries: dict[int, XidEntry] = {}
    for line, row in enumerate(reader, start=2):
        if not row["xid"].isdigit():
            raise ValueError(f"Xid catalog line {line}: xid {row['xid']!r} is not a number")
        xid = int(row["xid"])
        if xid in entries:
            raise ValueError(f"Xid catalog line {line}: duplicate xid {xid}")
        entries[xid] = XidEntry(
            xid=xid,
            name=row["name"],
            meaning=row["meaning"],
            recommended_action=row["recommended_action"],
            category=row["category"],
            nvidia_immediate_bucket=row["nvidia_immediate_bucket"],
            fault_domain=row["fault_domain"],
            source_url=row["source_url"],
        )
    return MappingProxyType(entries)


@cache
def catalog() -> Mapping[int, XidEntry]:
    """The packaged catalog, read once per process (a Lambda container reads it at most once)."""
    text = resources.files("nodeheal.policy").joinpath(CATALOG_RESOURCE).read_text(encoding="utf-8")
    return parse_catalog(text)


def lookup(xid: int) -> XidEntry | None:
    return catalog().get(xid)
