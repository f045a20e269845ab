"""Where a paths-disagree is filed: a one-token window under EAGLE gets its own key only where
the core's hybrid loop is the shorter path, so the keys already recorded keep their cases."""

from __future__ import annotations

from kvspec.divergences.known import core_loop_cause, load, paths_where
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.setting import LookupSetting

KNOWN = {where for kind, where in load() if kind == "paths-disagree"}
ONE_TOKEN = CacheGroup(Kind.SLIDING_WINDOW, 4, window=1, is_eagle_group=True)
WIDE = CacheGroup(Kind.SLIDING_WINDOW, 4, window=8, is_eagle_group=True)


def where(paths: str, groups, longer: str, core_shorter: bool, use_eagle: bool = True) -> str:
    setting = LookupSetting(tuple(groups), 4, use_eagle=use_eagle)
    return paths_where(paths, setting, longer, core_loop_cause(setting, core_shorter))


def test_a_one_token_window_under_eagle_is_filed_under_its_cause_where_the_core_is_shorter():
    assert where("core vs mooncake", [ONE_TOKEN] * 2, "mooncake", True) in KNOWN
    assert where("core vs connector", [CacheGroup(Kind.FULL, 4), ONE_TOKEN], "connector", True) in KNOWN
    assert "one-token window" in where("core vs mooncake", [ONE_TOKEN] * 2, "mooncake", True)


def test_other_cases_keep_the_keys_recorded_before_the_cause():
    assert where("core vs mooncake", [ONE_TOKEN] * 2, "core", False) == "core vs mooncake several groups EAGLE, core longer"
    assert where("core vs mooncake", [WIDE] * 2, "mooncake", True) == "core vs mooncake several groups EAGLE, mooncake longer"
    assert where("core vs mooncake", [ONE_TOKEN] * 2, "mooncake", True, use_eagle=False).endswith("no EAGLE, mooncake longer")
    assert "core vs mooncake several groups EAGLE, core longer" in KNOWN
