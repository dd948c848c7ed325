"""Making text from inside a sandbox safe to keep (it must always encode as UTF-8) and safe to show (no
control sequence reaches a terminal)."""

from __future__ import annotations

from typing import Any

# C0 controls but tab and newline, DEL, and the C1 controls (U+0080..U+009F: a terminal may read U+009B as
# CSI and U+009D as OSC); each becomes a visible escape such as `\x1b` or `\x9b`
_TERMINAL_ESCAPES = {
    code: f"\\x{code:02x}" for code in [*range(0x20), 0x7F, *range(0x80, 0xA0)] if code not in (0x09, 0x0A)
}


def safe_text(text: str) -> str:
    """`text` with every lone surrogate replaced by a visible escape: undecodable file-system bytes (carried
    as surrogate escapes) become `\\xNN`, any other lone surrogate `\\udNNN`. Valid text is returned as is."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    out = []
    for char in text:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def safe_value(value: Any) -> Any:
    """`value` with `safe_text` applied to every string in it, keys included (dicts, lists, tuples)."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {safe_value(k): safe_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(safe_value(v) for v in value)
    return value


def terminal_safe(text: str) -> str:
    """`text` made safe to print to a terminal: every control character other than newline and tab becomes a
    visible escape (`\x1b`, `\r`, `\x9b` as `\\x..`), so stored bytes cannot write the clipboard (OSC 52),
    set the title, clear the screen or move the cursor. Lone surrogates are escaped as `safe_text` does."""
    return safe_text(text).translate(_TERMINAL_ESCAPES)


def head_words(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters at a word boundary, ending with ` …` when cut."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    return (cut.rsplit(None, 1)[0] if " " in cut.strip() else cut) + " …"


def tail_words(text: str, limit: int) -> str:
    """The end of `text` (where a tool's error message says what failed) in about `limit` characters, cut at
    a word boundary and starting with `… ` when cut."""
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    return "… " + (cut.split(None, 1)[1] if " " in cut.strip() else cut)
