"""What a big result leaves the model: `fit` cuts a value of any shape to a
budget (saying how much it cut), and the history sent to the model shares
what is left among the results of one step instead of blanking some."""

from __future__ import annotations

import json

import pytest

from chat.agent import fit_history, trimmed_note
from chat.executor.shaping import fit

pytestmark = pytest.mark.usefixtures("english")


@pytest.mark.parametrize(
    "value",
    [
        "a" * 5_000_000,
        ["b" * 10] * 1_000_000,
        {f"k{n}": n for n in range(200_000)},
        {"blob": "c" * 2_000_000, "rows": [[n, "d" * 300] for n in range(50_000)], "name": "keep me"},
        [[["e" * 100_000] * 20] * 20],
    ],
)
def test_fit_bounds_any_shape_and_says_what_it_cut(value):
    cut = fit(value, 20_000)
    written = json.dumps(cut, ensure_ascii=False)
    assert len(written) <= 20_000
    assert "more characters" in written or "more items" in written or "more keys" in written


def test_fit_keeps_what_already_fits_and_short_values_whole():
    small = {"a": "x" * 50, "b": [1, 2, 3]}
    assert fit(small, 1_000) is small
    cut = fit({"token": "[전화번호-1]", "big": "y" * 10_000}, 2_000)
    assert cut["token"] == "[전화번호-1]" and cut["big"].startswith("yyyy")
    assert len(json.dumps(cut, ensure_ascii=False)) <= 2_000


def step(results: list[str]) -> list[dict]:
    calls = [
        {"id": f"c{n}", "type": "function", "function": {"name": "t", "arguments": "{}"}} for n in range(len(results))
    ]
    return [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        *({"role": "tool", "tool_call_id": f"c{n}", "content": r} for n, r in enumerate(results)),
    ]


def test_a_huge_result_does_not_blank_the_other_results_of_its_step():
    messages = step(["first " * 100, "z" * 500_000, "third " * 100])
    sent = fit_history(messages, budget=20_000, current=1)
    tools = [m["content"] for m in sent if m["role"] == "tool"]
    assert tools[0] == "first " * 100 and tools[2] == "third " * 100  # small ones whole
    assert tools[1].startswith("zzzz") and tools[1].endswith(trimmed_note(500_000))
    assert sum(len(m.get("content") or "") for m in sent) <= 20_000


def test_equal_big_results_of_one_step_get_equal_shares():
    messages = step(["a" * 60_000, "b" * 60_000, "c" * 60_000])
    sent = fit_history(messages, budget=30_000, current=1)
    tools = [m["content"] for m in sent if m["role"] == "tool"]
    assert [t[0] for t in tools] == ["a", "b", "c"]
    assert max(map(len, tools)) - min(map(len, tools)) <= 2
    assert sum(len(m.get("content") or "") for m in sent) <= 30_000
