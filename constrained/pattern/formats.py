"""Regexes for JSON Schema ``format`` values, written over the JSON-encoded string body.

Each regex is an under-approximation of its format (every match is a valid instance, checked by
``jsonschema.FormatChecker`` where a checker exists) and never needs a JSON escape, so the
decoded and the encoded string are the same characters.
"""

from __future__ import annotations

_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_HEX4 = r"[0-9a-fA-F]{1,4}"
_LABEL = r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
# Years 0001-9999 (Python's datetime has no year 0). 31 days: Jan Mar May Jul Aug Oct Dec; 30 days: Apr Jun Sep Nov; February stops at 28 (no leap rule).
_DATE = (
    r"([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)"
    r"|02-(0[1-9]|1[0-9]|2[0-8]))"
)
_TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
# Three labels at most keeps a hostname under the 253-character limit without counting.
_HOSTNAME = rf"{_LABEL}(\.{_LABEL}){{0,2}}"
_IPV4 = rf"{_OCTET}(\.{_OCTET}){{3}}"
_IPV6 = "|".join([
    rf"({_HEX4}:){{7}}{_HEX4}",
    rf"({_HEX4}:){{1,7}}:",
    rf"({_HEX4}:){{1,6}}:{_HEX4}",
    rf"({_HEX4}:){{1,5}}(:{_HEX4}){{1,2}}",
    rf"({_HEX4}:){{1,4}}(:{_HEX4}){{1,3}}",
    rf"({_HEX4}:){{1,3}}(:{_HEX4}){{1,4}}",
    rf"({_HEX4}:){{1,2}}(:{_HEX4}){{1,5}}",
    rf"{_HEX4}:(:{_HEX4}){{1,6}}",
    rf":((:{_HEX4}){{1,7}}|:)",
])
_URI_CHAR = r"([a-zA-Z0-9._~!$&'()*+,;=:@-]|%[0-9a-fA-F]{2})"
_URI = (
    rf"[a-zA-Z][a-zA-Z0-9+.-]*:(//{_HOSTNAME}(:[0-9]{{1,5}})?)?({_URI_CHAR}|/)*"
    rf"(\?({_URI_CHAR}|/|\?)*)?(#({_URI_CHAR}|/|\?)*)?"
)
_EMAIL = rf"[a-zA-Z0-9_+-]+(\.[a-zA-Z0-9_+-]+)*@{_LABEL}(\.{_LABEL}){{1,2}}"

FORMAT_REGEXES: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": rf"{_DATE}T{_TIME}",
    "email": _EMAIL,
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "uri": _URI,
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "hostname": _HOSTNAME,
}


def format_regex(name: str) -> str | None:
    """The body regex (without quotes) for a supported ``format``, or None if unknown."""
    return FORMAT_REGEXES.get(name)
