from __future__ import annotations

import pytest

from nodeheal.policy.catalog import XidEntry, catalog, lookup, parse_catalog
from nodeheal.policy.classify import CATEGORY_ACTIONS
from nodeheal.policy.signals import CONTAINMENT_XIDS, NVLINK5_XIDS, RECOVERY_ACTION_XID

DECODED_CATEGORIES = {"DECODE_REQUIRED", "ACTION_STATED_IN_MESSAGE"}


def test_lookup_returns_typed_entry_with_sources() -> None:
    entry = lookup(79)
    assert isinstance(entry, XidEntry)
    assert entry.name == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert entry.category == "NODE_REBOOT_POWER_CYCLE"
    assert entry.nvidia_immediate_bucket == "RESTART_BM"
    assert entry.fault_domain == "pcie/bus"
    assert "docs.nvidia.com/deploy/xid-errors" in entry.source_url


def test_lookup_of_unknown_xid_is_none() -> None:
    assert lookup(8) is None
    assert lookup(999) is None


def test_catalog_is_loaded_once() -> None:
    assert catalog() is catalog()


def test_every_entry_is_complete() -> None:
    for entry in catalog().values():
        assert entry.name and entry.meaning and entry.recommended_action, entry.xid
        assert entry.nvidia_immediate_bucket and entry.fault_domain and entry.source_url, entry.xid


def test_every_category_has_a_policy_or_a_decoder() -> None:
    """A catalog refresh that adds a category must come with a policy decision for it."""
    for entry in catalog().values():
        if entry.category in DECODED_CATEGORIES:
            assert entry.xid in NVLINK5_XIDS or entry.xid == RECOVERY_ACTION_XID, entry.xid
        else:
            assert entry.category in CATEGORY_ACTIONS, (entry.xid, entry.category)


def test_decoded_xids_are_in_the_catalog() -> None:
    for xid in {*CONTAINMENT_XIDS, *NVLINK5_XIDS, RECOVERY_ACTION_XID}:
        assert lookup(xid) is not None, xid


HEADER = "xid,name,meaning,recommended_action,category,nvidia_immediate_bucket,fault_domain,source_url\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("xid,name\n1,x\n", "columns"),
        (HEADER + "x1,n,m,r,c,b,d,u\n", "not a number"),
        (HEADER + "1,n,m,r,c,b,d,u\n1,n,m,r,c,b,d,u\n", "duplicate xid 1"),
    ],
)
def test_malformed_catalog_is_rejected(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_catalog(text)
