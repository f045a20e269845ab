"""An emitted grouping test is written for its release's rules (spec/releases.py) and passes on
that release's real vLLM, run as plain pytest in its own process with only vLLM importable."""

import ast
from pathlib import Path

import plain_vllm
import pytest

from kvspec.draws.real_models import REAL_MODELS, interleave
from kvspec.emit.vllm_tests import grouping_test
from kvspec.impl.target import releases_home
from kvspec.spec.grouping_properties import Model
from kvspec.spec.layers import Kind, LayerSpec, SpecDecode
from kvspec.spec.releases import NEWEST_RULES, rules_of

_FULL = LayerSpec(Kind.FULL, 16, num_kv_heads=8, head_size=128)
_MAMBA = LayerSpec(Kind.MAMBA, 16, state_bytes=557_056)
_WINDOW = LayerSpec(Kind.SLIDING_WINDOW, 16, num_kv_heads=8, head_size=128, window=128)
_HYBRID = interleave(8, lambda i: i % 4 == 3, _FULL, _MAMBA)

MODELS = {
    **REAL_MODELS,
    # MTP whose drafter is a Mamba layer registered last: flagged, and not (found by position
    # where specs carry no flag, left unannotated with a warning where they do).
    "mtp-mamba-last-flagged": Model({**_HYBRID, "mtp.layers.0.mixer": LayerSpec(Kind.MAMBA, 16, state_bytes=557_056,
                                                                               is_draft=True)}, SpecDecode("mtp")),
    "mtp-mamba-last": Model({**_HYBRID, "mtp.layers.0.mixer": _MAMBA}, SpecDecode("mtp")),
    # EAGLE with the block drop disabled: whether the unannotated-drafter warning follows.
    "eagle-no-drop-mamba": Model(_HYBRID, SpecDecode("eagle", disable_eagle_block_drop=True)),
    # The hybrid manager off: a sliding window promoted to full (a warning), a Mamba layer refused.
    "no-hybrid-window": Model(interleave(8, lambda i: i % 4 == 3, _FULL, _WINDOW), hybrid_manager=False),
    "no-hybrid-mamba-refused": Model(_HYBRID, hybrid_manager=False),
}


def _tree(version: str) -> Path | None:
    """The unpacked vLLM ``version``, where scripts/setup.sh puts it."""
    tree = releases_home() / version
    return tree if (tree / "vllm" / "__init__.py").is_file() else None


def _run_on(version: str, sources: dict[str, str], where: Path) -> dict[str, plain_vllm.Outcome]:
    """The emitted tests, run by pytest against the vLLM ``version`` tree and nothing of kvspec."""
    tree = _tree(version)
    if tree is None:
        pytest.skip(f"vLLM {version} is not unpacked")
    return plain_vllm.run_each({key.replace("-", "_"): source for key, source in sources.items()}, tree, where)


def _emitted(version: str) -> dict[str, str]:
    return {key: grouping_test(model, rules=rules_of(version)) for key, model in MODELS.items()}


def test_the_default_is_the_newest_release():
    for model in MODELS.values():
        assert grouping_test(model) == grouping_test(model, rules=NEWEST_RULES)


def test_a_release_that_groups_in_kv_cache_utils_gets_its_own_call_and_no_draft_flag():
    old, new = _emitted("0.32.0"), _emitted("0.34.0")
    for key in MODELS:
        assert "kv_cache_planning" not in old[key] and "is_draft" not in old[key], key
        assert "kv_cache_utils.get_kv_cache_groups(config, specs)" in old[key], key
        assert "kv_cache_utils.logger.addHandler(capture)" in old[key], key
        assert "kv_cache_planning.get_global_kv_cache_groups(config, [specs])" in new[key], key
        assert "import kvspec" not in old[key] and "import kvspec" not in new[key]
    assert all(("is_draft=True" in new[key]) == any(layer.is_draft for layer in model.layers.values())
               for key, model in MODELS.items())


def _asserted(source: str) -> list[str]:
    """Every assertion and ``pytest.raises`` whole (ruff's layout may split one over lines)."""
    nodes = ast.walk(ast.parse(source))
    return [ast.unparse(node) for node in nodes if isinstance(node, ast.Assert)
            or isinstance(node, ast.With) and "pytest.raises" in ast.unparse(node.items[0])]


def test_the_expectations_are_the_release_s_own():
    """Where the releases group or warn differently the emitted assertions differ too (the
    reference is asked for the release's rules), so the runs below check both releases' ways."""
    old, new = _emitted("0.32.0"), _emitted("0.34.0")
    differing = {key for key in MODELS if _asserted(old[key]) != _asserted(new[key])}
    assert {"mtp-mamba-last", "eagle-no-drop-mamba", "deepseek-v3"} <= differing


@pytest.mark.every_release
@pytest.mark.parametrize("version", ["0.32.0", "0.34.0"])
def test_the_emitted_tests_pass_on_their_release(version, tmp_path):
    outcomes = _run_on(version, _emitted(version), tmp_path / version)
    assert len(outcomes) == len(MODELS)
    assert all(o.status == "passed" for o in outcomes.values()), {k: o.text[-3000:] for k, o in outcomes.items()}
