"""Property-based: after masking no original survives; tokens are stable
within a conversation and independent across two."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from governance.pii.masking import InMemoryVault, mask_string, normalised_value, replace_tokens, tokens_in

phones = st.builds(
    lambda a, b, c, sep: f"{a}{sep}{b:04d}{sep}{c:04d}",
    st.sampled_from(["010", "011", "016", "019"]),
    st.integers(1000, 9999),  # subscriber numbers do not start with 0
    st.integers(0, 9999),
    st.sampled_from(["-", " ", ""]),
)
emails = st.builds(
    lambda user, domain: f"{user}@{domain}",
    st.from_regex(r"[a-z][a-z0-9._]{1,10}[a-z0-9]", fullmatch=True),
    st.sampled_from(["example.com", "corp.co.kr", "mail.kr"]),
)
values = st.lists(st.one_of(phones, emails), min_size=1, max_size=8)
filler = st.sampled_from(["고객 ", " 연락 바람, ", " / ", " 메모: ", " "])


def sentence(vals: list[str], fill: list[str]) -> str:
    return "".join(f + v for f, v in zip(fill, vals, strict=False)) + " 끝"


@settings(max_examples=150, deadline=None)
@given(values, st.lists(filler, min_size=8, max_size=8))
def test_no_original_survives_and_tokens_are_stable(vals, fill):
    vault = InMemoryVault()
    text = sentence(vals, fill)
    first = mask_string(text, vault)
    for value in vals:
        assert value not in first
    # Masking the same text again in the same conversation gives the same tokens.
    assert mask_string(text, vault) == first
    # Every token maps back to a value of this conversation.
    assert all(vault.original_for(kind, number) is not None for kind, number, _s, _e in tokens_in(first))
    # Each token stands for one of the values (the first spelling seen of a
    # normalised value), which is what re-identification puts back.
    normalised = {normalised_value(k, v) for v in vals for k in ("phone", "email")}
    for kind, number, _s, _e in tokens_in(first):
        assert normalised_value(kind, vault.original_for(kind, number)) in normalised
    assert tokens_in(replace_tokens(first, vault.original_for)) == []


@settings(max_examples=100, deadline=None)
@given(values, values)
def test_two_conversations_number_independently(a_vals, b_vals):
    a, b = InMemoryVault(), InMemoryVault()
    shared = a_vals[0]
    a_text = mask_string(" ".join(a_vals), a)
    b_text = mask_string(" ".join(b_vals + [shared]), b)
    # The shared value's token in b depends only on b's own history: b's
    # vault knows nothing of a's values.
    for kind, number, _s, _e in tokens_in(a_text):
        original = a.original_for(kind, number)
        if original not in " ".join(b_vals + [shared]):
            assert b.original_for(kind, number) is None or b.original_for(kind, number) != original
    assert all(b.original_for(k, n) is not None for k, n, _s, _e in tokens_in(b_text))


# --- known values: random result shapes and vault contents -----------------------------

hangul_names = st.text(alphabet=st.characters(min_codepoint=0xAC00, max_codepoint=0xD7A3), min_size=2, max_size=4)
latin_names = st.from_regex(r"[A-Z][a-z]{2,8} [A-Z][a-z]{2,8}", fullmatch=True)
vault_values = st.lists(
    st.one_of(
        st.tuples(st.just("name"), hangul_names),
        st.tuples(st.just("name"), latin_names),
        st.tuples(st.just("phone"), phones),
        st.tuples(st.just("email"), emails),
    ),
    min_size=1,
    max_size=12,
    unique_by=lambda kv: kv[1].lower(),
)


def _embed(value: str, case: str, before: str, after: str) -> str:
    written = {"upper": value.upper(), "lower": value.lower()}.get(case, value)
    return f"{before}{written}{after}"


embeddings = st.tuples(
    st.sampled_from(["as is", "upper", "lower"]),
    st.sampled_from(["", "고객 ", "x", "{"]),
    st.sampled_from(["", "님", " ", "}"]),
)


@st.composite
def result_shapes(draw, originals: list[str]):
    """A JSON-like tool output in which some originals appear: as whole cells,
    inside text, as object keys, at any depth."""

    def leaf():
        if draw(st.booleans()):
            how = draw(embeddings)
            return _embed(draw(st.sampled_from(originals)), *how)
        return draw(st.one_of(st.integers(), st.text(max_size=12), st.none()))

    def node(depth: int):
        shape = draw(st.sampled_from(["leaf", "list", "dict"] if depth < 3 else ["leaf"]))
        if shape == "leaf":
            return leaf()
        if shape == "list":
            return [node(depth + 1) for _ in range(draw(st.integers(0, 4)))]
        keys = [
            _embed(draw(st.sampled_from(originals)), *draw(embeddings))
            if draw(st.booleans())
            else draw(st.text(max_size=6))
            for _ in range(draw(st.integers(0, 4)))
        ]
        return {key: node(depth + 1) for key in keys}

    return node(0)


@settings(max_examples=200, deadline=None)
@given(st.data(), vault_values)
def test_no_vaulted_original_survives_any_result_shape(data, entries):
    import json

    from governance.pii.masking import mask_any, mask_rows

    vault = InMemoryVault()
    for kind, value in entries:
        vault.token_for(kind, value)
    known = vault.known_values()
    originals = [value for _kind, value in entries]
    shape = data.draw(result_shapes(originals))
    from governance.pii.masking import TOKEN_PATTERN

    # A token's own label may spell a value ("메일" in "[이메일-1]"): look outside tokens.
    masked = TOKEN_PATTERN.sub("", json.dumps(mask_any(shape, vault, known=known), ensure_ascii=False))
    rows = data.draw(st.lists(st.lists(result_shapes(originals), min_size=1, max_size=4), max_size=4))
    masked_rows = TOKEN_PATTERN.sub(
        "",
        json.dumps(mask_rows(rows, column_kinds={}, column_origins={}, vault=vault, known=known), ensure_ascii=False),
    )
    for original in originals:
        for written in {original, original.upper(), original.lower()}:
            assert json.dumps(written, ensure_ascii=False)[1:-1] not in masked, (original, masked)
            assert json.dumps(written, ensure_ascii=False)[1:-1] not in masked_rows, (original, masked_rows)
