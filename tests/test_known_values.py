"""Known-value masking: every original the conversation's vault holds is
replaced wherever it appears, whatever the vault's size."""

from __future__ import annotations

import pytest

from governance.pii.known_values import MIN_VALUE_CHARS, KnownValues
from governance.pii.masking import InMemoryVault, mask_any, mask_string


def matcher(*triples):
    return KnownValues(triples)


def test_replaces_every_occurrence_leftmost_longest_case_insensitive():
    known = matcher(
        ("김민준", "name", "[이름-1]"), ("김민", "name", "[이름-2]"), ("Kim@Example.com", "email", "[이메일-1]")
    )
    assert known.replace("김민준님과 김민, KIM@EXAMPLE.COM") == "[이름-1]님과 [이름-2], [이메일-1]"
    assert known.replace("no values here") == "no values here"


def test_offsets_hold_when_lowercasing_changes_length():
    # U+0130 lowercases to two code points; positions must still fit the original text.
    known = matcher(("Ahn Sohee", "name", "[이름-1]"))
    assert known.replace("İ AHN SOHEE İ") == "İ [이름-1] İ"


def test_values_shorter_than_the_minimum_are_not_searched():
    known = matcher(("김", "name", "[이름-1]"), ("  ", "name", "[이름-2]"))
    assert MIN_VALUE_CHARS == 2
    assert not known and known.replace("김 씨") == "김 씨"


def test_hits_count_for_statistics():
    seen = []
    known = matcher(("010-1234-5678", "phone", "[전화번호-1]"))
    assert known.replace("a 010-1234-5678 b 010-1234-5678", seen.append).count("[전화번호-1]") == 2
    assert seen == ["phone", "phone"]


def test_mask_string_runs_known_values_before_the_detectors():
    vault = InMemoryVault()
    token = vault.token_for("name", "박지후")  # names have no format: only the vault knows them
    text = "담당 박지후, 연락처 010-9999-8888"
    masked = mask_string(text, vault, known=vault.known_values())
    assert masked.startswith(f"담당 {token}, 연락처 [전화번호-")


def test_json_keys_are_masked_and_never_collide():
    vault = InMemoryVault()
    vault.token_for("name", "이서연")
    vault.token_for("name", "박지후")
    masked = mask_any({"이서연": 1, "박지후": {"이서연 메모": "010-1111-2222"}}, vault, known=vault.known_values())
    assert masked == {"[이름-1]": 1, "[이름-2]": {"[이름-1] 메모": "[전화번호-1]"}}
    # Two keys that mask to the same token keep both values.
    collided = mask_any({"이서연": 1, "이서연 ": 2}, vault, known=vault.known_values())
    assert sorted(collided.values()) == [1, 2]


@pytest.mark.django_db
def test_db_vault_known_values_follow_new_entries(django_user_model):
    from chat.services import conversation_create
    from chat.vault import DbVault

    user = django_user_model.objects.create_user("kv", password="pw-kv-12345")
    conversation = conversation_create(owner=user)
    vault = DbVault(conversation.pk)
    assert not vault.known_values()
    first = vault.token_for("name", "최도윤")
    assert vault.known_values().replace("최도윤 팀장") == f"{first} 팀장"
    second = vault.token_for("name", "정하은")
    known = DbVault(conversation.pk).known_values()
    assert known.replace("최도윤, 정하은") == f"{first}, {second}"
    # Another conversation's vault knows neither.
    other = DbVault(conversation_create(owner=user).pk)
    assert other.known_values().replace("최도윤") == "최도윤"


def test_an_extended_matcher_finds_old_and_new_values_leftmost_longest():
    known = matcher(("김민", "name", "[이름-1]"))
    for n in range(2, 40):  # enough additions to merge layers several times
        known = known.extended([(f"고객{n:03d}", "name", f"[이름-{n}]")])
    known = known.extended([("김민준", "name", "[이름-99]")])
    assert known.size == 40
    assert known.replace("김민준 고객007 김민 고객039") == "[이름-99] [이름-7] [이름-1] [이름-39]"
    assert known.extended([("김민", "name", "[이름-100]")]) is known  # nothing new: the same matcher


def test_a_value_spelled_inside_a_token_label_leaves_the_token_intact():
    vault = InMemoryVault()
    email = vault.token_for("email", "a@example.com")
    vault.token_for("name", "메일")  # a (two-syllable) name that is also part of the label 이메일
    assert mask_string(f"{email} 메일", vault, known=vault.known_values()) == f"{email} [이름-1]"


@pytest.mark.django_db
def test_within_a_turn_the_vault_is_read_once_and_new_entries_are_noted(
    django_user_model, django_capture_on_commit_callbacks, monkeypatch
):
    import contextlib

    from chat import vault as vault_module
    from chat.services import conversation_create
    from chat.vault import DbVault

    reads = []
    real_fetchall = vault_module.prepared.fetchall
    monkeypatch.setattr(
        vault_module.prepared, "fetchall", lambda sql, params: reads.append(sql) or real_fetchall(sql, params)
    )

    @contextlib.contextmanager
    def django_assert_num_queries(n):
        before = len(reads)
        yield
        assert len(reads) - before == n

    user = django_user_model.objects.create_user("kv2", password="pw-kv-12345")
    vault = DbVault(conversation_create(owner=user).pk)
    vault.known_values(turn_id=7)  # the turn's one read
    with django_capture_on_commit_callbacks(execute=True):
        token = vault.token_for("name", "한지민")
    with django_assert_num_queries(0):
        assert vault.known_values(turn_id=7).replace("한지민 님") == f"{token} 님"
    # The next turn reads the database again (another worker may have run the last one).
    with django_assert_num_queries(1):
        vault.known_values(turn_id=8)
