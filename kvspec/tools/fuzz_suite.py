"""Every campaign target as a test pytest and HypoFuzz collect, without fixtures: the property
tests of kvspec/tools/fuzz_targets.py (lookups, grouping) and kvspec/tools/fuzz_targets_checks.py
(every other Hypothesis-driven gate check's properties; the proofs are Z3, not Hypothesis) and the
stateful ``KVCacheManager`` machine (``TestCacheMachine``, the class ``kvspec fuzz`` runs, so
both share its database key).

    KVSPEC_VLLM=0.34.0 KVSPEC_FUZZ_DB=redis://host:6379 hypothesis fuzz -n 2 -- kvspec/tools/fuzz_suite.py

The machine needs vLLM to be built, so importing this module imports vLLM (from KVSPEC_VLLM or
KVSPEC_VLLM_SRC, with KVSPEC_INJECT's variants applied): ``kvspec fuzz`` never imports it.
"""

from __future__ import annotations

from hypothesis import settings

from kvspec.stateful.campaign import campaign_machine
from kvspec.tools.fuzz_targets import STATEFUL_STEPS, adapter
from kvspec.tools.fuzz_targets import test_core_lookups as test_core_lookups
from kvspec.tools.fuzz_targets import test_grouping as test_grouping
from kvspec.tools.fuzz_targets import test_mooncake_lookups as test_mooncake_lookups
from kvspec.tools.fuzz_targets_checks import test_block_sizes as test_block_sizes
from kvspec.tools.fuzz_targets_checks import (
    test_block_sizes_under_dcp_or_no_caching as test_block_sizes_under_dcp_or_no_caching,
)
from kvspec.tools.fuzz_targets_checks import test_connector_lookups as test_connector_lookups
from kvspec.tools.fuzz_targets_checks import test_dcp_core_lookups as test_dcp_core_lookups
from kvspec.tools.fuzz_targets_checks import test_eagle_margins as test_eagle_margins
from kvspec.tools.fuzz_targets_checks import test_grouping_across_workers as test_grouping_across_workers
from kvspec.tools.fuzz_targets_checks import test_mooncake_load_masks as test_mooncake_load_masks
from kvspec.tools.fuzz_targets_checks import test_mooncake_stores as test_mooncake_stores
from kvspec.tools.fuzz_targets_checks import test_offloading_load_bound as test_offloading_load_bound
from kvspec.tools.fuzz_targets_checks import test_offloading_lookups as test_offloading_lookups
from kvspec.tools.fuzz_targets_checks import test_offloading_stores as test_offloading_stores
from kvspec.tools.fuzz_targets_checks import test_simplecpuoffload_lookups as test_simplecpuoffload_lookups

CacheMachine = campaign_machine(adapter())
TestCacheMachine = CacheMachine.TestCase
TestCacheMachine.settings = settings(settings.default, stateful_step_count=STATEFUL_STEPS, deadline=None)
