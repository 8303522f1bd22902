"""Stage 2 of the match stage: the format patterns (ASCII, applied to
normalised text), one per kind and the "master" pattern that collects every
candidate of every kind in a region in one pass. governance.pii.detect.match
runs them; governance.pii.detect.rules judges what they find."""

from __future__ import annotations

import re

from governance.pii.detect.rules import _UUID

# Separator inside a phone / RRN / card / licence: hyphen or dot (optionally
# spaced) or one space. Versions (1.2.3) never have the card layouts'
# four-digit groups; a card with dots only must also start like one (as a
# bare run must: rules._card_confidence).
_SEP = r"(?:[ \t]?[-.][ \t]?|[ \t])"
_CSEP = _SEP

# National significant prefixes without the trunk 0, longest first: mobile
# 10-19, Seoul 2, area codes 31-33/41-44/51-55/61-64, 050X, 060/070/080.
_NAT = r"(?:50\d|1[016-9]|2|3[1-3]|4[1-4]|5[1-5]|6[1-4]|[678]0)"

# Branches in order of frequency (they start differently, so order never
# changes what matches): domestic, parenthesised area code, international.
_PHONE_BODY = rf"""
    (?:
        0{_NAT}\)?                                                                # 010-..., 02)123-4567
      | \(0{_NAT}\)                                                               # (02)123-4567
      | (?:\+[ \t]?82|00[ \t]?82|82(?=[ \t.-])){_SEP}?(?:\(0\)[ \t]?)?0?{_NAT}\)?   # +82 / 0082 / "82-"
    )
    {_SEP}?[1-9]\d{{2,3}}{_SEP}?\d{{4}}(?!\d)      # no exchange starts with 0: "02 010-..." is not one number
  | (?P<biz>1[568]\d\d[ \t]?-[ \t]?\d{{4}}(?!\d)(?![ \t]*[원년]))   # not "1500-2000원", a price range
"""

# YYMMDD with month 01-12 and day 01-31 (day-in-month is checked in Python),
# then the gender/century digit 1-8. Any separator or none, also inside the
# front half when it is written as a date (90.01.01-1234567, 9001.01.1234567);
# the one decimal-shaped spelling, 900101.1234567, is judged in Python
# (rules._reads_as_decimal).
# A front half with separators inside is set apart from the back half too
# (24.01.151234567 is a date glued to a number).
_MONTH, _DAY = r"(?:0[1-9]|1[0-2])", r"(?:0[1-9]|[12]\d|3[01])"
_RRN_BODY = rf"\d\d(?:{_MONTH}{_DAY}{_SEP}?|{_SEP}?{_MONTH}{_SEP}?{_DAY}{_SEP})[1-8]\d{{6}}(?!\d)"

_CARD_BODY = rf"""
    (?P<card16>\d{{4}}(?:{_CSEP}\d{{4}}){{3}})(?:{_CSEP}\d{{3}})?(?!\d)   # 4-4-4-4, 4-4-4-4-3
  | \d{{4}}{_CSEP}\d{{6}}{_CSEP}\d{{4,5}}(?!\d)                          # Amex 4-6-5, Diners 4-6-4
  | (?<![A-Za-z])\d{{13,19}}(?!\d)                                      # bare, not glued to a code
"""

# Digit groups joined by hyphens/dots: accounts and licences are decided in
# Python from the group layout. Not joined by spaces: "입금 1234567890 2024-01-15"
# is two numbers. A chain glued to letters ("ORD-2024-000123",
# "a716-446655440000") is part of a code, and it only starts at its head
# ("1234-5678" inside "010-1234-5678" is not a new chain).
_CHAIN_BEFORE = (
    r"(?<![A-Za-z_])(?<![A-Za-z0-9_][-_/])"
    r"(?<![0-9][-.])(?<![0-9][ \t][-.])(?<![0-9][-.][ \t])(?<![0-9][ \t][-.][ \t])"
)
_CHAIN_AFTER = r"(?![A-Za-z0-9_])(?![-_/][A-Za-z0-9])"
# Possessive: a chain is judged whole, never cut back to a prefix that passes
# the guards ("110-123-456789.5ORD" is a code, not an account + ".5ORD").
_CHAIN_BODY = rf"{_CHAIN_BEFORE}\d++(?:[ \t]?[-.][ \t]?\d++){{0,4}}+{_CHAIN_AFTER}"
# "계좌 110 123 456789": groups with a space between some (spaces also
# separate unrelated numbers), accepted next to an account word, or in a
# phone's layout (rules._spaced_account).
_SPACED_BODY = rf"{_CHAIN_BEFORE}(?<![0-9][ \t])\d{{2,7}}(?:{_SEP}\d{{2,7}}){{1,3}}{_CHAIN_AFTER}"

# The master regex: at each position that does not continue a digit run, every
# format is tried in its own lookahead, captured if it matches, else the empty
# branch; the final conditional drops positions where nothing matched. One
# pass in C thus yields every candidate of every kind, overlapping ones
# included, and Python only validates them (dates, Luhn, layouts) and
# resolves overlaps. "(?:(?=...)|)" rather than "(?:(?=...))?": the same
# match, but a group with captures under "?" runs `re`'s general repeat,
# which saves and restores the marks at each try (a fifth of the scan).
_MASTER = re.compile(
    rf"""
    (?<![0-9])(?=[0-9+(])
    (?:(?=(?P<rrn>{_RRN_BODY}))|)
    (?:(?=(?P<card>{_CARD_BODY}))|)
    (?:(?=(?P<phone>{_PHONE_BODY}))|)
    (?:(?=(?P<chain>{_CHAIN_BODY}))|)
    (?:(?=(?P<spaced>{_SPACED_BODY}))|)
    (?(rrn)|(?(card)|(?(phone)|(?(chain)|(?(spaced)|(?!))))))
    """,
    re.ASCII | re.VERBOSE,
)
# The same formats one at a time, for the common case of a region that is
# exactly one value.
_RRN_RX = re.compile(rf"(?<!\d){_RRN_BODY}", re.ASCII)
_CARD_RX = re.compile(rf"(?<!\d)(?:{_CARD_BODY})", re.ASCII | re.VERBOSE)
_PHONE_RX = re.compile(rf"(?<!\d)(?:{_PHONE_BODY})", re.ASCII | re.VERBOSE)
# The first branch of _PHONE_RX alone (domestic numbers), tried first on text
# that starts with "0": cheaper, and when it matches at all, _PHONE_RX returns
# that same match (its other branches come later and never start with "0"
# except "00 82", tried only after every domestic path failed).
_DOMESTIC_RX = re.compile(rf"(?<!\d)0{_NAT}\)?{_SEP}?[1-9]\d{{2,3}}{_SEP}?\d{{4}}(?!\d)", re.ASCII)
# The usual spellings (one separator, or none), for fullmatch over a whole
# region: a subset of _DOMESTIC_RX whose first match is then this one, for
# the prefixes are tried in the same order and the greedy choices coincide.
_PLAIN_PHONE_RX = re.compile(r"0(?:1[016-9]|2|3[1-3]|4[1-4]|5[1-5]|6[1-4]|70)([-. ]?)[1-9][0-9]{2,3}\1[0-9]{4}")
_CHAIN_RX = re.compile(_CHAIN_BODY, re.ASCII)
# A region made of digit groups joined by hyphens/dots only, and a group
# from which a phone can start (0X, 0082, 82, 15xx/16xx/18xx).
_PLAIN_CHAIN = re.compile(r"\d+(?:[-.]\d+)*", re.ASCII)
_PHONE_HEAD = re.compile(r"(?<![0-9])(?:0[1-9]|0082|82|1[568])", re.ASCII)

_PASSPORT_RX = re.compile(
    r"(?<![A-Za-z0-9])(?:[A-Za-z]{1,2}\d{7,8}|[A-Za-z]\d{3}[A-Za-z]\d{4})(?![A-Za-z0-9])",
    re.ASCII,
)

# E-mail, matched around each "@": the local part is the run of allowed chars
# right before it (at most 64), the domain is matched right after it. Both are
# bounded, so no input makes this quadratic. The local part takes every RFC
# 5322 atom symbol and, for internationalised addresses (RFC 6531), any
# Unicode letter or digit; a domain label is letters/digits/hyphens of any
# script (IDN). Read on normalised text, so full-width forms are ASCII here.
_EMAIL_LOCAL = re.compile(r"[\w!#$%&'*+/=?^`{|}~.-]{1,64}\Z")
# The same for ASCII, tried first: several times faster, and the same answer
# unless the run reaches a non-ASCII character (see _find_emails).
_EMAIL_LOCAL_ASCII = re.compile(r"[A-Za-z0-9_!#$%&'*+/=?^`{|}~.-]{1,64}\Z", re.ASCII)
# The top-level domain: punycode, ASCII letters (which may be followed by a
# Hangul particle: "hong@example.com으로"), a Hangul TLD from the short list of
# those that exist (the text after it is a particle: "홍길동@회사.한국으로"), or
# the letters of another script.
_EMAIL_DOMAIN = re.compile(
    r"(?:[^\W_](?:[\w-]{0,61}[^\W_])?\.){1,8}"
    r"(?:xn--[A-Za-z0-9-]{1,59}(?![\w-])|[A-Za-z]{2,24}(?![A-Za-z0-9-])|한국|삼성|닷컴|닷넷"
    r"|[^\W\d_A-Za-z\u1100-\u11ff\u3130-\u318f\uac00-\ud7a3]{2,24}(?![\w-]))"
)
# The same domain on ASCII text, where it matches exactly what _EMAIL_DOMAIN
# does (the Hangul and other-script branches cannot match), only faster.
_EMAIL_DOMAIN_ASCII = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?\.){1,8}"
    r"(?:xn--[A-Za-z0-9-]{1,59}(?![A-Za-z0-9_-])|[A-Za-z]{2,24}(?![A-Za-z0-9-]))",
    re.ASCII,
)
# A cell that is exactly one address, as _find_emails would find it: an
# ASCII local part of 1-64 chars not starting with a dot and without quotes
# (see _find_emails), and a domain (whose labels are fixed by the dots, so its
# first match is the whole rest).
_EMAIL_CELL = re.compile(
    rf"[A-Za-z0-9!#$%&*+/=?^_{{|}}~-][A-Za-z0-9!#$%&*+/=?^_{{|}}~.-]{{0,63}}@{_EMAIL_DOMAIN_ASCII.pattern}",
    re.ASCII,  # for ASCII cells only, where the Unicode classes match the same
)

_UUID_CELL = re.compile(rf"{_UUID.pattern}|\{{{_UUID.pattern}\}}", re.ASCII)
# A cell that is one date or timestamp: 2024-01-15, 2024.01.15, 2024-01-15
# 12:34[:56[.123456]][Z|+09:00], 2024-01-15T12:34:56, 20240115123456. Such a
# cell holds nothing (the date has 8 digits, the rest are short groups; a
# fraction of 7+ digits, which could hold a number, is not taken here).
_DATE_CELL = re.compile(
    r"(?:19|20)[0-9][0-9]([-./])[0-9][0-9]\1[0-9][0-9]"
    r"(?:[T ][0-9][0-9]:[0-9][0-9](?::[0-9][0-9](?:\.[0-9]{1,6})?)?(?:Z|[+-][0-9][0-9]:?[0-9][0-9])?)?"
    r"|(?:19|20)[0-9]{12}",
    re.ASCII,
)
