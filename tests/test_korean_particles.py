"""owlai.korean: the particle after a value follows its last sound."""

from __future__ import annotations

import pytest
from django.utils import translation

from owlai.korean import final_sound, localized_particles, particle, with_particles


@pytest.mark.parametrize(
    ("word", "double", "expected"),
    [
        ("이름", "을(를)", "을"),
        ("주소", "을(를)", "를"),
        ("전화번호", "을(를)", "를"),
        ("계좌번호", "은(는)", "는"),
        ("이메일", "은(는)", "은"),
        ("사람", "이(가)", "이"),
        ("컬럼", "과(와)", "과"),
        ("표", "과(와)", "와"),
        ("서울", "(으)로", "로"),  # ㄹ takes 로
        ("집", "(으)로", "으로"),
        ("바다", "(으)로", "로"),
        ("SQL", "을(를)", "을"),  # 에스큐엘
        ("SQL", "(으)로", "로"),
        ("DB", "이(가)", "가"),  # 디비
        ("API", "은(는)", "는"),
        ("80%", "이(가)", "가"),  # 퍼센트
        ("3", "을(를)", "을"),  # 삼
        ("2", "을(를)", "를"),  # 이
        ("7", "(으)로", "로"),  # 칠
        ("phone", "을(를)", "을"),
        ("name", "이(가)", "이"),  # 네임
        ("orders", "은(는)", "는"),  # 오더스
        ("table", "(으)로", "로"),  # 테이블
        ("email", "(으)로", "로"),
        ("'이름'", "을(를)", "을"),  # closing quotes are skipped
        ("", "을(를)", "을(를)"),  # nothing to read: both forms stay
        ("…", "이(가)", "이(가)"),
    ],
)
def test_particle_follows_the_last_sound(word, double, expected):
    assert particle(word, double) == expected


def test_final_sound_of_hangul():
    assert final_sound("이름") == "other" and final_sound("서울") == "ㄹ" and final_sound("주소") is None


def test_every_double_form_in_a_sentence():
    text = "컬럼 이름이 이름을(를) 가리키고 주소을(를) 담은 표이(가) 서울(으)로 갑니다"
    assert with_particles(text) == "컬럼 이름이 이름을 가리키고 주소를 담은 표가 서울로 갑니다"


def test_only_korean_text_is_changed():
    with translation.override("en"):
        assert localized_particles("x을(를)") == "x을(를)"
    with translation.override("ko"):
        assert localized_particles("이름을(를)") == "이름을"


@pytest.mark.parametrize(
    ("kind", "expected", "english"),
    [
        ("name", "컬럼 이름이 이름을 가리킵니다", "column name suggests Name"),
        ("address", "컬럼 이름이 주소를 가리킵니다", "column name suggests Address"),
    ],
)
def test_a_classification_reason_takes_the_particle_its_kind_needs(kind, expected, english):
    from governance.schema_analysis import classify_column, reason_text

    verdict = classify_column(kind, [])
    assert verdict.reason == f"column name suggests {kind}"  # stored in English
    with translation.override("ko"):
        assert reason_text(verdict.reason) == expected
    with translation.override("en"):
        assert reason_text(verdict.reason) == english
