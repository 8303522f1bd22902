"""One language per user: Korean by default, or English; the switcher's
choice is stored and wins, else the browser's language. A turn runs in the
language resolved when it started, so its refusal reasons, errors and the
demo model's replies come in it, never half in the other language."""

from __future__ import annotations

import json
import re

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import translation
from django.utils.translation import gettext_noop

from accounts.language import browser_language, language_from, user_language, user_language_set
from accounts.models import UserPreference
from chat.demo_model import extract_sql
from chat.models import Turn
from chat.services import conversation_create
from governance.refusals import REFUSED_FRAME, Phrase, Reason, localize
from governance.sql.guard import analyse_sql
from owlai.asgi import application
from tests.sql_cases import MUST_DENY

HANGUL = re.compile(r"[\uac00-\ud7a3]")
# Names a Korean sentence keeps as written (the SQL it quotes is kept too).
KEPT = {"sql", "select", "into", "from", "for", "update", "share", "table"}


def english_words(text: str, *, quoted: str) -> list[str]:
    """Latin-script words in `text` that are neither from the quoted SQL, nor
    SQL keywords (upper case: the guard names a statement by its kind, e.g.
    COMMIT for END), nor names kept as written: in a Korean sentence,
    untranslated English."""
    allowed = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z_0-9]*", quoted)} | KEPT
    words = re.findall(r"[A-Za-z][A-Za-z_]+", text)
    return [w for w in words if w.lower() not in allowed and not w.isupper()]


def korean_words(text: str, *, quoted: str) -> list[str]:
    return [c for c in HANGUL.findall(text) if c not in quoted]


# --- Refusal reasons ---------------------------------------------------------------


def read_only_refusal(verdict_reason: Reason) -> Reason:
    """As the SQL tool refuses a query the guard denied (chat.executor.tools.sql)."""
    return Reason(gettext_noop("not a read-only query: %(reason)s"), reason=Phrase(verdict_reason))


@pytest.mark.parametrize(
    ("dialect", "sql", "expected"), MUST_DENY, ids=[f"{c[0]}-{i}" for i, c in enumerate(MUST_DENY)]
)
def test_every_guard_refusal_reads_in_one_language(dialect, sql, expected):
    verdict = analyse_sql(sql, dialect)
    assert not verdict.allowed
    reason = Reason(REFUSED_FRAME, reason=read_only_refusal(verdict.reason))
    # The audit row keeps the fixed English form, word for word.
    assert reason.for_audit() == f"refused: not a read-only query: {verdict.reason}"
    with translation.override("ko"):
        korean = localize(reason)
    with translation.override("en"):
        english = localize(reason)
    assert HANGUL.search(korean), korean
    assert english_words(korean, quoted=sql) == [], korean
    assert korean_words(english, quoted=sql) == [], english
    assert not english.startswith("refused")  # the model-facing frame is not for people


@pytest.mark.parametrize(
    "reason",
    [
        Reason(gettext_noop("no permission to read table(s): %(tables)s"), tables="salaries"),
        Reason(gettext_noop("personal data would decide how many rows this query returns; count or aggregate instead")),
        Reason(gettext_noop("no connection of that name is available")),
        Reason(gettext_noop("the call could not be checked and was refused")),
        Reason(gettext_noop("arguments longer than %(limit)s characters; send a shorter call"), limit=100000),
        Reason(
            gettext_noop(
                "the connection's database account may do more than read (%(risks)s); "
                "an admin must give it an account with only SELECT on its schemas"
            ),
            risks="SUPER, FILE",
        ),
        Reason("%(error)s", error=Phrase("the statement could not be parsed for re-identification")),
        "query failed",
    ],
)
def test_executor_reasons_read_in_one_language(reason):
    with translation.override("ko"):
        korean = localize(reason)
    assert HANGUL.search(korean) and english_words(korean, quoted="salaries SUPER FILE SELECT") == [], korean


def test_text_that_is_no_message_is_kept_as_written():
    # E.g. a database's own error after the tool's translated failure words:
    # never parsed back into a message, never half translated.
    with translation.override("ko"):
        text = "요청을 처리하지 못했습니다: relation x does not exist"
        assert localize(text) == text


def test_the_model_and_the_person_read_the_same_words_without_the_frame():
    # The model reads "거부됨: <reason>" in a Korean turn (the pipeline renders
    # the reason, then frames it); a person reads the reason alone, as in
    # English (the page's step already says "refused").
    refusal = read_only_refusal(analyse_sql("DELETE FROM t", "postgres").reason)
    with translation.override("ko"):
        framed = translation.gettext(REFUSED_FRAME) % {"reason": refusal.for_model()}
        assert framed.startswith("거부됨")
        assert localize(framed) == localize(refusal) == localize(Reason(REFUSED_FRAME, reason=refusal))
        assert localize(refusal) == "읽기 전용 쿼리가 아닙니다: 쓰기는 허용되지 않습니다(DELETE)"
    with translation.override("en"):
        assert localize(refusal) == "not a read-only query: writing is not allowed (DELETE)"
        assert refusal.for_audit() == "not a read-only query: write statement: DELETE"


# --- The demo model reads SQL that starts with any statement keyword ----------------


@pytest.mark.parametrize(
    "text",
    ["DELETE FROM customers", "drop table customers", "@sales UPDATE customers SET name = 'x'", "SHOW TABLES",
     "EXPLAIN SELECT 1", "select 1", "WITH a AS (SELECT 1) SELECT * FROM a", "TRUNCATE customers", "call f()"],
)  # fmt: skip
def test_demo_model_treats_statement_keywords_as_sql(text):
    assert extract_sql(text) is not None


@pytest.mark.parametrize("text", ["안녕하세요", "hello", "How many customers?", "검색 환불", "search refund", ""])
def test_demo_model_leaves_other_messages_alone(text):
    assert extract_sql(text) is None


# --- Choosing and storing the language -----------------------------------------------


def test_browser_language_order():
    assert browser_language(cookie="en", accept_language="ko") == "en"
    assert browser_language(cookie="", accept_language="en-US,en;q=0.9,ko;q=0.5") == "en"
    assert browser_language(cookie="fr", accept_language="de, ko-KR;q=0.5") == "ko"
    assert browser_language(cookie=None, accept_language="de, fr") is None


@pytest.mark.django_db
def test_the_switcher_stores_the_choice_and_it_wins_on_every_browser(django_user_model):
    user = django_user_model.objects.create_user("lee", password="pw-lee-12345")
    first = Client(HTTP_ACCEPT_LANGUAGE="ko")
    first.force_login(user)
    response = first.post("/i18n/setlang/", {"language": "en", "next": "/"})
    assert response.status_code == 302
    assert user_language(user=user) == "en"
    # Another browser, asking for Korean, without the cookie: English all the same.
    other = Client(HTTP_ACCEPT_LANGUAGE="ko")
    other.force_login(user)
    page = other.get("/")
    assert page.status_code == 200 and page["Content-Language"] == "en"
    # and the cookie follows, so that browser's websocket speaks English too
    assert page.cookies["django_language"].value == "en"
    # An unsupported code stores nothing.
    first.post("/i18n/setlang/", {"language": "xx", "next": "/"})
    assert user_language(user=user) == "en"
    with pytest.raises(ValueError):
        user_language_set(user=user, language="xx")


@pytest.mark.django_db
def test_without_a_choice_the_browser_decides(django_user_model):
    user = django_user_model.objects.create_user("kim", password="pw-kim-12345")
    for accept, expected in (("en-US,en;q=0.8", "en"), ("ko-KR", "ko"), ("de", "ko")):
        client = Client(HTTP_ACCEPT_LANGUAGE=accept)
        client.force_login(user)
        assert client.get("/")["Content-Language"] == expected
    assert not UserPreference.objects.filter(user=user).exists()
    assert language_from(stored=user_language(user=user), fallback="en") == "en"
    assert language_from(stored=user_language(user=user), fallback=None) == "ko"
    user_language_set(user=user, language="en")
    assert language_from(stored=user_language(user=user), fallback="ko") == "en"
    assert language_from(stored="xx", fallback="xx") == "ko"


# --- A whole turn, in the user's language ----------------------------------------------


def _cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def _turn(user, text: str, *, accept_language: str = "", model: str | None = None) -> list[dict]:
    """One turn over the real consumer; the socket sends no language cookie."""
    conversation = conversation_create(owner=user)
    headers = [(b"host", b"localhost"), (b"origin", b"http://localhost")]
    headers.append((b"cookie", f"sessionid={_cookie(user)}".encode()))
    if accept_language:
        headers.append((b"accept-language", accept_language.encode()))

    async def scenario():
        comm = WebsocketCommunicator(application, f"/ws/chat/{conversation.pk}/", headers=headers)
        assert (await comm.connect())[0]
        frame = {"type": "turn.start", "text": text, **({"model": model} if model else {})}
        await comm.send_to(text_data=json.dumps(frame))
        events = []
        while not events or events[-1]["type"] != "turn.finished":
            event = json.loads(await comm.receive_from(timeout=15))
            if event["type"] != "state":
                events.append(event)
        await comm.send_to(text_data="{not json")
        events.append(json.loads(await comm.receive_from(timeout=5)))
        await comm.disconnect()
        return events

    return async_to_sync(scenario)()


SQL = "DELETE FROM customers"


@pytest.mark.django_db(transaction=True)
def test_an_english_users_turn_is_english_end_to_end(personas, install_models):
    user_language_set(user=personas.staff, language="en")
    # The socket's browser asks for Korean: the stored choice wins for the turn.
    events = _turn(personas.staff, f"@sales {SQL}", accept_language="ko")
    finished = next(e for e in events if e["type"] == "tool.finished")
    assert finished["outcome"] == "denied"
    answer = next(e for e in events if e["type"] == "message.completed")["text"]
    assert "writing is not allowed (DELETE)" in answer, answer
    assert korean_words(answer, quoted=SQL) == [], answer
    assert Turn.objects.get(conversation__owner=personas.staff).language == "en"

    # The demo model's other replies and a rejected turn: English too.
    listing = next(e for e in _turn(personas.staff, "hello") if e["type"] == "message.completed")["text"]
    assert "offline demo model" in listing and not HANGUL.search(listing.replace("sales", "")), listing
    rejected = next(e for e in _turn(personas.staff, "hi", model="no-such-model") if e["type"] == "turn.rejected")
    assert "No usable model" in rejected["reason"]


@pytest.mark.django_db(transaction=True)
def test_a_korean_users_turn_is_korean_end_to_end(personas, install_models):
    events = _turn(personas.staff, f"@sales {SQL}")  # no choice, no browser preference: the default
    answer = next(e for e in events if e["type"] == "message.completed")["text"]
    assert HANGUL.search(answer) and "DELETE" in answer, answer
    assert english_words(answer, quoted=f"sales {SQL}") == [], answer
    socket_error = events[-1]
    assert socket_error["code"] == "malformed_json" and HANGUL.search(socket_error["message"])
    rejected = next(e for e in _turn(personas.staff, "hi", model="no-such-model") if e["type"] == "turn.rejected")
    assert HANGUL.search(rejected["reason"]) and english_words(rejected["reason"], quoted="") == []


@pytest.mark.django_db(transaction=True)
def test_the_socket_follows_the_browser_when_nothing_is_stored(personas, install_models):
    events = _turn(personas.staff, f"@sales {SQL}", accept_language="en-US,en;q=0.9")
    answer = next(e for e in events if e["type"] == "message.completed")["text"]
    assert korean_words(answer, quoted=SQL) == [] and "DELETE" in answer
    assert events[-1]["code"] == "malformed_json" and not HANGUL.search(events[-1]["message"])
    assert Turn.objects.get().language == "en"


# --- API errors ----------------------------------------------------------------------


@pytest.mark.parametrize(("language", "expected"), [("ko", "찾을 수 없습니다."), ("en", "Not found.")])
@pytest.mark.django_db
def test_api_404_details_come_in_the_sessions_language(client, personas, language, expected):
    from chat.services import conversation_create

    theirs = conversation_create(owner=personas.admin)
    client.force_login(personas.staff)
    for url in (f"/api/conversations/{theirs.pk}/", "/api/tokens/999999/"):
        response = (
            client.get(url, HTTP_ACCEPT_LANGUAGE=language)
            if "tokens" not in url
            else client.delete(url, HTTP_ACCEPT_LANGUAGE=language)
        )
        assert response.status_code == 404 and response.json() == {"detail": expected}, url


@pytest.mark.parametrize("language", ["ko", "en"])
@pytest.mark.django_db
def test_api_errors_read_in_one_language(client, personas, language):
    """DRF's own messages (ko_KR in its package, which Django's ko never
    loads) in the session's language, like ours."""
    import re

    anonymous = client.get("/api/conversations/", HTTP_ACCEPT_LANGUAGE=language).json()["detail"]
    client.force_login(personas.staff)
    invalid = client.post("/api/tokens/", {}, content_type="application/json", HTTP_ACCEPT_LANGUAGE=language).json()
    wrong_method = client.put("/api/tokens/", {}, content_type="application/json", HTTP_ACCEPT_LANGUAGE=language)
    texts = [anonymous, invalid["name"][0], wrong_method.json()["detail"]]
    hangul = [bool(re.search("[가-힣]", text)) for text in texts]
    assert hangul == [language == "ko"] * 3, texts
