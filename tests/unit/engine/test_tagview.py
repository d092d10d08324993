"""What the tagger sees: bounded, structured, deterministic; and the tag cases keep their answer."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwrap.aux import prompts
from ctxwrap.engine.tagview import tag_view
from ctxwrap.testing.model_server import AuxRule

SOURCE = "import os\n\n" + "".join(
    f"def helper_{i}(x):\n    '''helper {i}'''\n    return x * {i}\n\n" for i in range(200)
)


def test_short_results_are_shown_whole() -> None:
    assert tag_view("small result\n", 1500) == "small result\n"


def test_a_long_result_keeps_head_outline_and_tail_within_the_budget() -> None:
    view = tag_view(SOURCE, 1500)
    assert len(view) <= 1500
    assert view.startswith("import os\n\ndef helper_0(x):")
    assert "return x * 199" in view  # the tail
    assert "lines between; outline of them:]" in view
    outline = view.split("outline of them:]\n", 1)[1].split("\n[…]", 1)[0].splitlines()
    assert len(outline) >= 5 and all(line.startswith("  def helper_") for line in outline)
    # spread over the file, not just its first definitions
    numbers = [int(line.split("_")[1].split("(")[0]) for line in outline]
    assert numbers == sorted(numbers) and numbers[-1] - numbers[0] > 100


def test_unstructured_text_gets_a_sample_and_one_huge_line_is_cut() -> None:
    text = "".join(f"plain row {i}\n" for i in range(2000))
    view = tag_view(text, 1500)
    assert len(view) <= 1500 and "sample of them:]" in view and "plain row 1999" in view
    huge = "x" * 50_000
    assert len(tag_view(huge, 1500)) <= 1500


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=6000), st.integers(200, 3000))
def test_never_over_budget_and_deterministic(text: str, budget: int) -> None:
    view = tag_view(text, budget)
    assert len(view) <= max(budget, 0)
    assert view == tag_view(text, budget)
    if len(text) <= budget:
        assert view == text


# The tag cases of the test suite (e2e, integration): the scripted tagger's answer on the
# bounded view must equal its answer on the old full prompt (6,000 chars of the result).
CASES = [
    ("read", {"path": "LICENSE"}, "LICENSE TEXT\n" + "".join(
        f"Permission is hereby granted, clause {i}, irrelevant-marker\n" for i in range(120)),
     "irrelevant-marker"),
    ("read", {"path": "config_parser.py"}, "def parse_config(path):\n" + "".join(
        f"    # relevant detail {i}: keep me\n" for i in range(120)), "irrelevant-marker"),
    ("read", {"path": "VENDOR_LICENSE"}, "".join(
        f"irrelevant line {i} of a vendored license\n" for i in range(400)), "vendored license"),
    ("read", {"path": "LICENSE"}, "".join(
        f"clause {i}: irrelevant legal text\n" for i in range(300)), "irrelevant legal text"),
    ("read", {"path": "old.py"}, SOURCE, "node_modules"),
]  # fmt: skip


def _answer(prompt: str, match: str) -> str:
    rule = AuxRule("tag", '{"decision": "DROP"}', match)
    return "DROP" if rule.match is not None and rule.match in prompt else "RETAIN"


def test_tag_decisions_of_the_test_cases_do_not_change() -> None:
    old_total = new_total = 0
    for tool, args, result, match in CASES:
        old = prompts.tag_prompt(
            tool=tool, args=args, result=result, user_prompt="fix the parser", max_chars=6000
        )
        new = prompts.tag_prompt(
            tool=tool,
            args=args,
            result=tag_view(result, 1500),
            user_prompt="fix the parser",
            max_chars=6000,
        )
        assert _answer(new, match) == _answer(old, match), (args, match)
        old_total += len(prompts.TAG_SYSTEM) + len(old)
        new_total += len(prompts.TAG_SYSTEM) + len(new)
    # measured: what the tagger is sent shrinks to well under half
    assert new_total < old_total * 0.45, (new_total, old_total)
