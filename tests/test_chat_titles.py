"""A conversation's title from its first message: the first line a person
would read, not markdown syntax."""

from __future__ import annotations

import pytest

from chat.services import title_from_message


@pytest.mark.parametrize(
    ("message", "title"),
    [
        ("```\nSELECT name FROM customers\n```", "SELECT name FROM customers"),
        ("```sql\n\nSELECT 1\n```\n이게 뭐죠?", "SELECT 1"),
        ("~~~python\nprint('x')\n~~~", "print('x')"),
        ("  ```  \n```", "```"),  # nothing else to read: the text itself
        ("# 매출 보고서\n내용", "매출 보고서"),
        ("> 인용문\n질문", "인용문"),
        ("- 첫 항목\n- 둘째", "첫 항목"),
        ("고객 `id` 목록", "고객 `id` 목록"),
    ],
)
def test_a_title_skips_markdown_syntax(message, title):
    assert title_from_message(message) == title
