"""The lookup and block-size rules that differ before 0.32 (spec/releases.py), on the reference
alone (no vLLM): the EAGLE group's look past the cap, the Mooncake store deciding partial hits
itself, and a single group's prefix-match unit. `kvspec check --vllm-src <0.31.0 tree>` compares
them with real vLLM (docs/older-releases.md)."""

import pytest

from kvspec.reference.lookup import coordinator_lookup, mooncake_lookup
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.releases import rules_of
from kvspec.spec.resolution import resolved_block_sizes, resolved_hash_block_size
from kvspec.spec.setting import CacheState, LookupSetting

OLDER, NEWER = rules_of("0.31.0"), rules_of("0.34.0")


@pytest.mark.parametrize("cap, older, newer", [(64, 48, 64), (127, 96, 112)])
def test_an_eagle_group_looks_past_the_cap_only_where_the_release_lets_it(cap, older, newer):
    # vLLM's own numbers for these (docs/older-releases-survey.md, section 4): full 16 with EAGLE
    # beside a sliding window, 8 hash units all cached.
    setting = LookupSetting((CacheGroup(Kind.FULL, 16), CacheGroup(Kind.SLIDING_WINDOW, 16, window=32)), 16,
                            use_eagle=True)
    everything = CacheState.full_prefix(num_groups=2, num_hashes=8)
    assert coordinator_lookup(setting, everything, cap, OLDER).length == older
    assert coordinator_lookup(setting, everything, cap, NEWER).length == newer


def test_a_store_that_decides_partial_hits_itself_ignores_the_sliding_window_manager():
    setting = LookupSetting((CacheGroup(Kind.SLIDING_WINDOW, 2, window=1), CacheGroup(Kind.MAMBA, 4)), 1)
    cached = CacheState(6, frozenset({(0, 1), (0, 3), (0, 5), *((1, i) for i in range(6))}))
    assert mooncake_lookup(setting, cached, 6, OLDER).length == 6  # on the hash unit: off the core's 4
    assert mooncake_lookup(setting, cached, 6, NEWER).length == 4  # the core's alignment


def test_one_group_s_foreign_prefix_match_unit_is_refused_only_where_the_release_refuses_it():
    with pytest.raises(ValueError):
        resolved_hash_block_size([16], 8)
    assert resolved_hash_block_size([16], 8, one_group_refuses=False) == 16
    assert resolved_block_sizes([CacheGroup(Kind.FULL, 16)], 8, rules=OLDER) == (16, 16, 16)


def test_one_mamba_group_s_block_is_stretched_over_dcp_ranks_only_where_the_release_does_it():
    assert resolved_block_sizes([CacheGroup(Kind.MAMBA, 16)], dcp=2) == (16, 16, 16)
    assert resolved_block_sizes([CacheGroup(Kind.MAMBA, 16)], dcp=2, rules=rules_of("0.30.0")) == (32, 32, 32)
