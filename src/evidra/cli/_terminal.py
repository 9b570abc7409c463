"""Text the CLI did not write itself, shown on a terminal: control characters written out, never obeyed.

A file name or title read from a page store, a page id, a tool name or an answer a model wrote
may hold terminal escape sequences (``\\x1b]0;...\\x07`` retitles the window, ``\\x1b[2J`` clears
the screen, the C1 byte ``\\x9b`` opens a command on some terminals), a newline that forges a line
of output, or a bidi override that reorders what the reader sees. Every such value goes through
``shown`` before it is printed, and every JSON line through ``json_line``; the error line and the
log lines of ``main`` and ``_logging`` too.
"""

from __future__ import annotations

import json
import re

# C0 (newline and tab included), DEL, C1, and the Unicode controls that reorder or break lines
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    code = ord(ch)
    return _NAMED.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def shown(text: object, keep: str = "") -> str:
    """``text`` with every control character written out as its escape; those in ``keep`` (a
    newline, for text meant to span lines) stay as they are.

    >>> shown("report\\x1b]0;pwned\\x07.pdf"), shown("a\\x1b[2Jb\\nc\\u202e")
    ('report\\\\x1b]0;pwned\\\\x07.pdf', 'a\\\\x1b[2Jb\\\\nc\\\\u202e')
    >>> shown("two\\nlines\\r", keep="\\n")
    'two\\nlines\\\\r'
    """
    return _UNSAFE.sub(lambda m: m[0] if m[0] in keep else _escape(m[0]), str(text))


def json_line(record: object, *, ascii_only: bool = False) -> str:
    """``record`` as one line of JSON holding no raw control character: ``json`` escapes C0
    itself; DEL, C1 and the bidi controls are written as ``\\uXXXX`` here, which reads back as
    the same string. Other non-ASCII text is kept as it is unless ``ascii_only``.

    >>> json_line({"source": "a\\x9b2J\\x1b.pdf"})
    '{"source": "a\\\\u009b2J\\\\u001b.pdf"}'
    """
    text = json.dumps(record, ensure_ascii=ascii_only)
    return _UNSAFE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)
