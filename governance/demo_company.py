"""A sample Korean company database for the demo connection.

Pure Python (stdlib only, no Django) so it can be built from anywhere. The data
is deterministic for a given seed and reference date (a Monday; by default the
Monday of the current week, so "last week" in a demo question means last week;
tests pass the fixed ``REFERENCE_DATE``): every row lies before it. The ``consultations.memo`` column holds free-text
agent notes, some of which carry personal data (phone numbers, e-mail
addresses, refund bank accounts) the way real call-centre notes do.

A handful of customers (``REPEAT_REFUNDERS``) asked for a refund four or more
times in the week before the reference date, so a question such as
"지난주에 환불을 세 번 넘게 요청한 고객" has answers; a few near misses
(exactly three that week, a fourth the week before) keep the question honest.
"""

from __future__ import annotations

import os
import random
import sqlite3
import tempfile
from datetime import date, datetime, timedelta
from pathlib import Path

# Data runs up to the day before the reference date ("as of Monday morning"):
# the previous calendar week (Mon-Sun) and the last seven days then coincide.
# Tests pin this one so their expectations never move.
REFERENCE_DATE = date(2025, 12, 1)
# Customers with 4+ refund consultations in the week before REFERENCE_DATE.
REPEAT_REFUNDERS = 5
# Customers with exactly 3 refund consultations that week (plus one the week before).
NEAR_MISS_REFUNDERS = 3

CUSTOMER_COUNT = 200
CONSULTATION_COUNT = 600
ORDER_COUNT = 1000
CONSULTATION_HISTORY_DAYS = 180
ORDER_HISTORY_DAYS = 365

SCHEMA = """
CREATE TABLE customers (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    phone TEXT NOT NULL,
    email TEXT NOT NULL,
    grade TEXT NOT NULL,
    city TEXT NOT NULL,
    joined_on TEXT NOT NULL
);
CREATE TABLE consultations (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers(id),
    channel TEXT NOT NULL,
    category TEXT NOT NULL,
    memo TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE orders (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers(id),
    product TEXT NOT NULL,
    amount INTEGER NOT NULL,
    status TEXT NOT NULL,
    ordered_on TEXT NOT NULL
);
CREATE INDEX idx_consultations_customer_id ON consultations(customer_id);
CREATE INDEX idx_consultations_created_at ON consultations(created_at);
CREATE INDEX idx_orders_customer_id ON orders(customer_id);
CREATE INDEX idx_orders_ordered_on ON orders(ordered_on);
"""

# (hangul, romanization) so e-mail addresses look like the person's name.
FAMILY_NAMES = [
    ("김", "kim"),
    ("이", "lee"),
    ("박", "park"),
    ("최", "choi"),
    ("정", "jung"),
    ("강", "kang"),
    ("조", "cho"),
    ("윤", "yoon"),
    ("장", "jang"),
    ("임", "lim"),
    ("한", "han"),
    ("오", "oh"),
    ("서", "seo"),
    ("신", "shin"),
    ("권", "kwon"),
    ("황", "hwang"),
    ("안", "ahn"),
    ("송", "song"),
    ("류", "ryu"),
    ("홍", "hong"),
]
# Rough frequency of the family names above (김, 이, 박 dominate).
FAMILY_WEIGHTS = [21, 15, 8, 5, 4, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1]
GIVEN_NAMES = [
    ("민준", "minjun"),
    ("서준", "seojun"),
    ("도윤", "doyun"),
    ("예준", "yejun"),
    ("시우", "siwoo"),
    ("하준", "hajun"),
    ("지호", "jiho"),
    ("주원", "juwon"),
    ("지훈", "jihoon"),
    ("준서", "junseo"),
    ("현우", "hyunwoo"),
    ("건우", "geonwoo"),
    ("우진", "woojin"),
    ("성민", "sungmin"),
    ("동현", "donghyun"),
    ("영수", "youngsu"),
    ("상철", "sangcheol"),
    ("재훈", "jaehoon"),
    ("서연", "seoyeon"),
    ("서윤", "seoyun"),
    ("지우", "jiwoo"),
    ("하은", "haeun"),
    ("하윤", "hayun"),
    ("민서", "minseo"),
    ("지유", "jiyu"),
    ("윤서", "yunseo"),
    ("채원", "chaewon"),
    ("수아", "sua"),
    ("지민", "jimin"),
    ("예은", "yeeun"),
    ("수빈", "subin"),
    ("유진", "yujin"),
    ("은지", "eunji"),
    ("미경", "mikyung"),
    ("정희", "junghee"),
    ("영희", "younghee"),
    ("혜진", "hyejin"),
    ("소영", "soyoung"),
    ("경숙", "kyungsook"),
    ("다은", "daeun"),
]
EMAIL_DOMAINS = ["naver.com", "naver.com", "gmail.com", "gmail.com", "daum.net", "hanmail.net", "kakao.com", "nate.com"]
CITIES = [
    ("서울", 30),
    ("부산", 9),
    ("인천", 7),
    ("대구", 6),
    ("대전", 4),
    ("광주", 4),
    ("울산", 3),
    ("수원", 5),
    ("성남", 4),
    ("고양", 4),
    ("용인", 4),
    ("창원", 3),
    ("청주", 3),
    ("전주", 2),
    ("천안", 3),
    ("세종", 2),
    ("제주", 2),
]
GRADES = [("VIP", 8), ("골드", 20), ("실버", 32), ("일반", 40)]
CHANNELS = [("전화", 45), ("채팅", 30), ("이메일", 15), ("방문", 10)]
CATEGORIES = [("배송", 30), ("환불", 20), ("교환", 15), ("결제", 15), ("기타", 20)]
# (product, min won, max won); amounts are rounded to 100 won.
PRODUCTS = [
    ("무선 이어폰", 59_000, 249_000),
    ("블루투스 스피커", 39_000, 189_000),
    ("스마트워치", 129_000, 459_000),
    ("노트북 파우치", 15_000, 45_000),
    ("기계식 키보드", 69_000, 229_000),
    ("무선 마우스", 19_000, 89_000),
    ("휴대폰 케이스", 9_900, 29_000),
    ("보조배터리", 19_900, 59_000),
    ("USB-C 충전기", 15_900, 49_000),
    ("공기청정기", 159_000, 499_000),
    ("전기포트", 29_000, 89_000),
    ("에어프라이어", 79_000, 199_000),
    ("로봇청소기", 299_000, 899_000),
    ("가습기", 39_000, 129_000),
    ("커피머신", 149_000, 690_000),
    ("전동칫솔", 39_000, 149_000),
    ("헤어드라이어", 49_000, 399_000),
    ("모니터 받침대", 25_000, 79_000),
]
BANKS = [
    # (bank, account number block lengths)
    ("국민은행", (6, 2, 6)),
    ("신한은행", (3, 3, 6)),
    ("우리은행", (4, 3, 6)),
    ("하나은행", (3, 6, 5)),
    ("농협", (3, 4, 4, 2)),
    ("카카오뱅크", (4, 2, 7)),
    ("기업은행", (3, 6, 2, 3)),
]

REFUND_MEMOS = [
    "고객이 {product} 단순 변심으로 환불 요청. 반품 회수 접수 완료.",
    "{product} 초기 불량으로 환불 요청. 사진 확인 후 승인함.",
    "배송 지연 불만으로 {product} 주문 환불 요청. 결제 취소 처리 예정.",
    "{product} 사이즈/색상 불일치로 환불 원함. 회수 기사 방문 일정 안내.",
    "환불 진행 상황 문의. 카드사 승인 취소까지 3~5영업일 소요 안내.",
    "{product} 포장 훼손 상태로 도착, 환불 요청. 상담사 확인 후 전액 환불 안내.",
]
REFUND_ACCOUNT_MEMOS = [
    "무통장 결제 건 환불 요청. 환불 계좌 {account} (예금주 {name}) 로 입금 예정.",
    "{product} 환불 요청. 고객이 불러준 환불 계좌: {account}. 예금주 본인 확인함.",
    "환불 계좌 변경 요청. 기존 계좌 대신 {account} 로 환불해 달라고 함.",
]
SHIPPING_MEMOS = [
    "{product} 배송 조회 문의. 택배사 집하 지연으로 1~2일 추가 소요 안내.",
    "배송지 변경 요청. 출고 전이라 변경 처리 완료.",
    "{product} 배송 완료로 표시되나 미수령 문의. 택배사에 확인 요청함.",
    "도서산간 추가 배송비 문의. 제주 지역 3,000원 추가 안내.",
    "부재 시 경비실 보관 요청 메모 추가함.",
]
EXCHANGE_MEMOS = [
    "{product} 색상 교환 요청. 재고 확인 후 교환 접수.",
    "{product} 불량으로 동일 상품 교환 진행. 회수 후 재발송 예정.",
    "교환 상품 발송 일정 문의. 회수 상품 검수 중으로 안내.",
    "{product} 사이즈 교환 문의. 교환 배송비 고객 부담 안내함.",
]
PAYMENT_MEMOS = [
    "카드 결제 오류 문의. 한도 초과로 승인 거절된 것으로 확인.",
    "{product} 결제 이중 청구 문의. 한 건 승인 취소 처리함.",
    "무이자 할부 가능 여부 문의. 5만원 이상 3개월 무이자 안내.",
    "현금영수증 발급 요청. 주문번호 기준 발급 완료.",
    "포인트 적립 누락 문의. 수동 적립 처리함.",
]
OTHER_MEMOS = [
    "회원 등급 혜택 문의. 등급별 적립률 안내함.",
    "{product} 사용법 문의. 설명서 PDF 안내.",
    "비밀번호 재설정 방법 문의. 본인 인증 후 재설정 안내.",
    "쿠폰 적용 안 됨 문의. 최소 주문 금액 미달로 확인.",
    "상품 입고 예정일 문의. 다음 주 입고 예정 안내.",
    "회원 탈퇴 문의. 잔여 포인트 소멸 안내 후 보류.",
]
MEMOS_BY_CATEGORY = {
    "환불": REFUND_MEMOS,
    "배송": SHIPPING_MEMOS,
    "교환": EXCHANGE_MEMOS,
    "결제": PAYMENT_MEMOS,
    "기타": OTHER_MEMOS,
}
# Agent notes that add personal data to a memo.
PHONE_NOTES = [
    " 연락처 {phone} 로 회신 요망.",
    " 본인 번호 말고 {phone} (배우자 번호) 로 연락 달라고 함.",
    " 부재 시 {phone} 로 문자 남겨 달라고 요청.",
]
EMAIL_NOTES = [
    " 처리 결과는 {email} 로 메일 발송 요청.",
    " 영수증을 {email} 로 재발송함.",
]
ORDER_STATUSES_OLD = [("배송완료", 82), ("취소", 8), ("환불완료", 10)]
ORDER_STATUSES_RECENT = [("주문완료", 35), ("배송중", 45), ("배송완료", 20)]


def _weighted(rng: random.Random, pairs: list[tuple[str, int]]) -> str:
    values = [v for v, _w in pairs]
    weights = [w for _v, w in pairs]
    return rng.choices(values, weights=weights, k=1)[0]


def _digits(rng: random.Random, length: int) -> str:
    return "".join(str(rng.randrange(10)) for _ in range(length))


def _phone(rng: random.Random) -> str:
    return f"010-{rng.randrange(2000, 10000):04d}-{rng.randrange(10000):04d}"


def _account(rng: random.Random) -> str:
    bank, blocks = rng.choice(BANKS)
    return f"{bank} " + "-".join(_digits(rng, n) for n in blocks)


def _timestamp(rng: random.Random, day: date) -> str:
    moment = datetime(day.year, day.month, day.day, rng.randrange(9, 19), rng.randrange(60), rng.randrange(60))
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _customers(rng: random.Random, ref: date) -> list[dict]:
    customers: list[dict] = []
    phones: set[str] = set()
    emails: set[str] = set()
    first_join = date(2019, 1, 1)
    join_span = (ref - timedelta(days=30) - first_join).days
    for customer_id in range(1, CUSTOMER_COUNT + 1):
        family, family_roman = rng.choices(FAMILY_NAMES, weights=FAMILY_WEIGHTS, k=1)[0]
        given, given_roman = rng.choice(GIVEN_NAMES)
        phone = _phone(rng)
        while phone in phones:
            phone = _phone(rng)
        phones.add(phone)
        email = f"{given_roman}.{family_roman}{rng.randrange(10, 100)}@{rng.choice(EMAIL_DOMAINS)}"
        while email in emails:
            email = f"{given_roman}{family_roman}{rng.randrange(100, 1000)}@{rng.choice(EMAIL_DOMAINS)}"
        emails.add(email)
        customers.append(
            {
                "id": customer_id,
                "name": family + given,
                "phone": phone,
                "email": email,
                "grade": _weighted(rng, GRADES),
                "city": _weighted(rng, CITIES),
                "joined_on": first_join + timedelta(days=rng.randrange(join_span)),
            }
        )
    return customers


def _memo(rng: random.Random, category: str, customer: dict) -> str:
    product = rng.choice(PRODUCTS)[0]
    if category == "환불" and rng.random() < 0.35:
        template = rng.choice(REFUND_ACCOUNT_MEMOS)
    else:
        template = rng.choice(MEMOS_BY_CATEGORY[category])
    memo = template.format(product=product, account=_account(rng), name=customer["name"])
    roll = rng.random()
    if roll < 0.18:
        phone = customer["phone"] if rng.random() < 0.5 else _phone(rng)
        memo += rng.choice(PHONE_NOTES).format(phone=phone)
    elif roll < 0.28:
        memo += rng.choice(EMAIL_NOTES).format(email=customer["email"])
    return memo


def _consultation(rng: random.Random, customer: dict, category: str, day: date) -> dict:
    return {
        "customer_id": customer["id"],
        "channel": _weighted(rng, CHANNELS),
        "category": category,
        "memo": _memo(rng, category, customer),
        "created_at": _timestamp(rng, day),
    }


def _consultations(rng: random.Random, customers: list[dict], ref: date) -> list[dict]:
    last_day = ref - timedelta(days=1)
    # The week before the reference date, Monday to Sunday.
    week = [ref - timedelta(days=n) for n in range(7, 0, -1)]
    week_before = [d - timedelta(days=7) for d in week]
    # Customers who joined long enough ago to have a history.
    eligible = [c for c in customers if c["joined_on"] <= ref - timedelta(days=60)]
    special = rng.sample(eligible, REPEAT_REFUNDERS + NEAR_MISS_REFUNDERS)
    rows: list[dict] = []
    for index, customer in enumerate(special):
        if index < REPEAT_REFUNDERS:
            for day in sorted(rng.sample(week, rng.randint(4, 6))):
                rows.append(_consultation(rng, customer, "환불", day))
        else:
            for day in sorted(rng.sample(week, 3)):
                rows.append(_consultation(rng, customer, "환불", day))
            rows.append(_consultation(rng, customer, "환불", rng.choice(week_before)))
    special_ids = {c["id"] for c in special}
    # Background traffic. No other customer gets more than two refund
    # consultations in the last two weeks, so the answers above stay exact.
    recent_refunds: dict[int, int] = {}
    recent_from = week_before[0]
    while len(rows) < CONSULTATION_COUNT:
        customer = rng.choice(customers)
        first_day = max(customer["joined_on"], ref - timedelta(days=CONSULTATION_HISTORY_DAYS))
        day = first_day + timedelta(days=rng.randrange((last_day - first_day).days + 1))
        category = _weighted(rng, CATEGORIES)
        if category == "환불" and day >= recent_from:
            if customer["id"] in special_ids or recent_refunds.get(customer["id"], 0) >= 2:
                category = "배송"
            else:
                recent_refunds[customer["id"]] = recent_refunds.get(customer["id"], 0) + 1
        rows.append(_consultation(rng, customer, category, day))
    rows.sort(key=lambda r: (r["created_at"], r["customer_id"]))
    return rows


def _orders(rng: random.Random, customers: list[dict], ref: date) -> list[dict]:
    last_day = ref - timedelta(days=1)
    weights = [{"VIP": 6, "골드": 3, "실버": 2, "일반": 1}[c["grade"]] for c in customers]
    rows: list[dict] = []
    for _ in range(ORDER_COUNT):
        customer = rng.choices(customers, weights=weights, k=1)[0]
        first_day = max(customer["joined_on"], ref - timedelta(days=ORDER_HISTORY_DAYS))
        day = first_day + timedelta(days=rng.randrange((last_day - first_day).days + 1))
        product, low, high = rng.choice(PRODUCTS)
        amount = rng.randrange(low, high + 1) // 100 * 100
        recent = (ref - day).days <= 5
        status = _weighted(rng, ORDER_STATUSES_RECENT if recent else ORDER_STATUSES_OLD)
        rows.append(
            {
                "customer_id": customer["id"],
                "product": product,
                "amount": amount,
                "status": status,
                "ordered_on": day.isoformat(),
            }
        )
    rows.sort(key=lambda r: (r["ordered_on"], r["customer_id"]))
    return rows


def _write(conn: sqlite3.Connection, customers: list[dict], consultations: list[dict], orders: list[dict]) -> None:
    conn.executescript(SCHEMA)
    conn.executemany(
        "INSERT INTO customers (id, name, phone, email, grade, city, joined_on) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (c["id"], c["name"], c["phone"], c["email"], c["grade"], c["city"], c["joined_on"].isoformat())
            for c in customers
        ],
    )
    conn.executemany(
        "INSERT INTO consultations (id, customer_id, channel, category, memo, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        [
            (i, r["customer_id"], r["channel"], r["category"], r["memo"], r["created_at"])
            for i, r in enumerate(consultations, start=1)
        ],
    )
    conn.executemany(
        "INSERT INTO orders (id, customer_id, product, amount, status, ordered_on) VALUES (?, ?, ?, ?, ?, ?)",
        [
            (i, r["customer_id"], r["product"], r["amount"], r["status"], r["ordered_on"])
            for i, r in enumerate(orders, start=1)
        ],
    )


def _remove(path: Path) -> None:
    for candidate in (path, *(path.with_name(path.name + s) for s in ("-journal", "-wal", "-shm"))):
        try:
            candidate.unlink()
        except FileNotFoundError:
            pass


def current_week_monday(today: date | None = None) -> date:
    today = today or date.today()
    return today - timedelta(days=today.weekday())


def build_demo_company_db(path: str | Path, *, seed: int = 7, reference_date: date | None = None) -> dict[str, int]:
    """(Re)create the demo company SQLite file at ``path``; return row counts per table.

    The file is built under a temporary name in the same directory and moved
    into place in one step, so a half-written database never remains.
    """
    target = Path(path).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    # Rows lie before the reference date; by default the Monday of this week,
    # so "last week" in a demo question means last week.
    ref = reference_date or current_week_monday()
    customers = _customers(rng, ref)
    consultations = _consultations(rng, customers, ref)
    orders = _orders(rng, customers, ref)

    _remove(target)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; the data is fictional
    try:
        conn = sqlite3.connect(tmp)
        try:
            with conn:
                _write(conn, customers, consultations, orders)
            counts = {
                table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in ("customers", "consultations", "orders")
            }
        finally:
            conn.close()
        os.replace(tmp, target)
    except BaseException:
        _remove(tmp)
        raise
    return counts
