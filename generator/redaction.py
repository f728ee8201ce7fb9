"""The one redaction of configured secrets from everything that leaves goldens.

A secret is a credential the user configured to reach a server: the API key (`--api-key-env`),
the value of every `--header` whose name says it carries one (`credential_header`:
Authorization, Cookie, X-Api-Key, anything naming a key, token, secret, password, session or
signature; `X-Debug: 1` is not a secret) and the userinfo of a `--url` (`http://user:pass@host`).
They are registered once, where they are parsed (`register`).

A secret can come back only from a server that was sent it (some proxies quote the key they
rejected), so it is taken out of the *values* a server gives, before anything escapes or
serializes them (an escape letter in front of a key, `\\nsk-12345`, hid it from a redaction of
escaped text: issue 44): `redact` removes every form of every secret wherever it stands in a
value, whatever its length or neighbours, and every run of PARTIAL characters of a longer one
(an echo cut short). engines/remote.py's `Remote` applies it to every reply of a server it sent a
secret to (its string values, and the text it quotes of one), engines/pool.py to what a plugin
engine (handed the secrets) says, and `redact_pieces` to token pieces (a key spelled out across
them).

What goldens writes itself is never rewritten: a case id, a count or a word of a report holding
`none`, `36` or `user` stays as it is when a configured value happens to be that word. As a
backstop at the two places output leaves the tool (stdout/stderr through `install`, files
through `files.atomic_write` and the job summary, `redact_output`/`redact_file`), a secret of
DISTINCT characters or more, which no word of ours spells, is removed in every form too; in a
JSON file inside its string values as decoded, in an XML file inside text and attribute values
as unescaped, so reports stay valid and their numbers true.
"""

from __future__ import annotations

import functools
import html
import io
import json
import re
import sys
import threading
import urllib.parse
from collections.abc import Iterable, Sequence

REDACTED = "[redacted]"

PARTIAL = 8  # this many consecutive characters of a longer secret are redacted too (a cut-short echo)
DISTINCT = 8  # a secret this long is no word of ours: the output backstop removes it everywhere

# header names that carry a credential (RFC 9110 Authorization, cookies, vendors' API-key headers)
_CREDENTIAL = re.compile(r"auth|key|token|secret|passw|cookie|session|signature|credential|bearer", re.I)


def credential_header(name: str) -> bool:
    """Whether a header's value is a credential to redact (`X-Api-Key`, `Authorization`), not a
    setting (`X-Debug`): redacting a `1` everywhere would falsify every number in every report."""
    return bool(_CREDENTIAL.search(name))

_lock = threading.Lock()
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None
_spelled: list[str] = []
_grams: re.Pattern[str] | None = None


def forms(secret: str) -> set[str]:
    """Every spelling of `secret` an output may carry."""
    out = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1],
           urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret, safe=""),
           urllib.parse.quote(secret), repr(secret)[1:-1], html.escape(secret, quote=True),
           html.escape(secret, quote=False), secret.replace("'", "&apos;").replace('"', "&quot;"),
           re.sub(r"([\\`*|<\[\]])", r"\\\1", secret), secret.replace("|", "\\|")}
    xml = secret.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out |= {xml, xml.replace('"', "&quot;"), xml.replace('"', "&quot;").replace("'", "&apos;")}
    return {form for form in out if form}


def register(*values: str | None) -> None:
    """Add secrets (empty values ignored); from now on no output carries them."""
    global _pattern, _spelled, _grams
    with _lock:
        _secrets.update(v for v in values if v)
        _pattern, _grams, _spelled = _compiled(tuple(sorted(_secrets)))


@functools.lru_cache(maxsize=16)
def _compiled(secrets: tuple[str, ...]):
    """The exact-forms pattern (anywhere), the partial-runs pattern and the forms long enough for it."""
    spelled = sorted({form for s in secrets for form in forms(s)}, key=len, reverse=True)
    pattern = re.compile("|".join(map(re.escape, spelled))) if spelled else None
    long = [form for form in spelled if len(form) > PARTIAL]
    grams = {form[i:i + PARTIAL] for form in long for i in range(len(form) - PARTIAL + 1)}
    return pattern, (re.compile(_trie(grams)) if grams else None), long


@functools.lru_cache(maxsize=16)
def _distinct(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    """Every form of every secret of DISTINCT characters or more: the output backstop's pattern."""
    spelled = sorted({form for s in secrets if len(s) >= DISTINCT for form in forms(s)}, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, spelled))) if spelled else None


def _trie(words: Iterable[str]) -> str:
    """One regex matching any of `words`, as a trie (a flat alternation of hundreds of words
    scans a report at a megabyte a second; the trie at tens)."""
    root: dict = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def pattern(node: dict) -> str:
        branches = [re.escape(char) + pattern(child) for char, child in sorted(node.items()) if char]
        if "" in node:
            branches.append("")
        if len(branches) == 1:
            return branches[0]
        return "(?:" + "|".join(branches) + ")"

    return pattern(root)


def clear() -> None:
    """Forget every secret (tests, and a second command run in one process)."""
    global _pattern, _spelled, _grams
    with _lock:
        _secrets.clear()
        _pattern, _spelled, _grams = None, [], None


def secrets() -> list[str]:
    return sorted(_secrets, key=len, reverse=True)


def redact(text: str, extra: tuple[str, ...] = ()) -> str:
    """A value (what a server said, before any escaping) with every form of every registered
    secret (and of `extra`, a Connection's own) replaced by `[redacted]`, wherever it stands."""
    pattern, grams, spelled = _pattern, _grams, _spelled
    if extra:
        pattern, grams, spelled = _compiled(tuple(sorted(set(extra) | _secrets)))
    if pattern is None or not text:
        return text
    text = pattern.sub(REDACTED, text)
    return text if grams is None else _partial(text, grams, spelled)


def scrub(value, extra: tuple[str, ...] = ()):
    """Every string value in a JSON value (a server's reply) redacted; keys, numbers, booleans
    and structure as they are (a count stays a count, a field keeps its name)."""
    if isinstance(value, str):
        return redact(value, extra)
    if isinstance(value, list):
        return [scrub(item, extra) for item in value]
    if isinstance(value, dict):  # keys are the reply's structure; quoting a reply redacts them as text
        return {key: scrub(item, extra) for key, item in value.items()}
    return value


def redact_output(text: str) -> str:
    """The backstop for text leaving the tool: every form of every DISTINCT-long secret removed,
    wherever it stands; a shorter value could be a word of ours and is left to `redact`."""
    pattern = _distinct(tuple(sorted(_secrets))) if _secrets else None
    return text if pattern is None or not text else pattern.sub(REDACTED, text)


def _partial(text: str, grams: re.Pattern[str], spelled: list[str]) -> str:
    """Every run of PARTIAL or more consecutive characters of a secret (a key a server quotes
    cut short, or with its middle starred out), widened to the longest run that matches."""
    out, at = [], 0
    for match in grams.finditer(text):
        if match.start() < at:
            continue
        start, end = match.start(), match.end()
        for form in spelled:
            offset = form.find(match.group())
            while offset != -1:
                lo, hi = start, end
                while lo > 0 and offset - (start - lo) > 0 and text[lo - 1] == form[offset - (start - lo) - 1]:
                    lo -= 1
                while hi < len(text) and offset + (hi - start) < len(form) and text[hi] == form[offset + (hi - start)]:
                    hi += 1
                start, end = min(start, max(lo, at)), max(end, hi)
                offset = form.find(match.group(), offset + 1)
        out += [text[at:start], REDACTED]
        at = end
    return "".join(out) + text[at:]


def redact_bytes(data: bytes, kind: str = "") -> bytes:
    """`redact_file` for UTF-8 bytes (a file about to be written); other bytes are left as they are."""
    if not _secrets or _distinct(tuple(sorted(_secrets))) is None:
        return data
    try:
        return redact_file(data.decode("utf-8"), kind).encode("utf-8")
    except UnicodeDecodeError:
        return data


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_XML_TAG = re.compile(r"<[^>]*>")
_XML_VALUE = re.compile(r'"[^"]*"|\'[^\']*\'')


def redact_file(text: str, kind: str = "") -> str:
    """`redact_output` that keeps a file's structure and sees values as they are: for `kind`
    "json" each string literal decoded, redacted and written again only where it changed
    (numbers, keys' quotes and brackets stay as they are), for "xml" text and quoted attribute
    values unescaped first (never a tag or attribute name); anything else as text. `[redacted]`
    holds no character that JSON or XML would need escaped."""
    if not text or not _secrets:
        return text
    if kind == "json":
        def literal(match: re.Match) -> str:
            try:
                value = json.loads(match.group())
            except ValueError:
                return redact_output(match.group())
            cleaned = redact_output(value)
            return match.group() if cleaned == value else json.dumps(cleaned, ensure_ascii=False)
        return _JSON_STRING.sub(literal, text)
    if kind == "xml":
        def value(escaped: str, quote: str = "") -> str:
            raw = html.unescape(escaped)
            cleaned = redact_output(raw)
            if cleaned == raw:
                return redact_output(escaped)
            out = cleaned.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            return out.replace(quote, "&quot;" if quote == '"' else "&apos;") if quote else out

        out, at = [], 0
        for tag in _XML_TAG.finditer(text):
            out += [value(text[at:tag.start()]),
                    _XML_VALUE.sub(lambda m: m.group()[0] + value(m.group()[1:-1], m.group()[0]) + m.group()[0],
                                   tag.group())]
            at = tag.end()
        return "".join(out) + value(text[at:])
    return redact_output(text)


def redact_pieces(pieces: Sequence[str]) -> list[str]:
    """Token pieces with every piece that holds part of a secret, spelled out across pieces
    or inside one, replaced by `[redacted]` (the ids stay: they are numbers)."""
    pieces = list(pieces)
    if not _secrets or not pieces:
        return pieces
    joined = "".join(pieces)
    hit = [False] * len(joined)
    for secret in _secrets:
        for form in forms(secret):
            for match in re.finditer(re.escape(form), joined):
                for i in range(match.start(), match.end()):
                    hit[i] = True
    if not any(hit):
        return [redact(p) for p in pieces]
    out, at = [], 0
    for piece in pieces:
        out.append(REDACTED if any(hit[at:at + len(piece)]) else redact(piece))
        at += len(piece)
    return out


def url_secrets(url: str) -> list[str]:
    """The userinfo of a URL (`user:pass`, the password, a user that is a token): secrets."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError:
        return []
    if "@" not in parts.netloc:
        return []
    userinfo = parts.netloc.rpartition("@")[0]
    user, _, password = userinfo.partition(":")
    values = [userinfo, urllib.parse.unquote(userinfo)]
    values += [password, urllib.parse.unquote(password)] if password else [user, urllib.parse.unquote(user)]
    return [v for v in values if v]


class _Redacting(io.TextIOBase):
    """A text stream that redacts every write before passing it on."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact_output(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self):
        return getattr(self._stream, "encoding", "utf-8")

    @property
    def buffer(self):  # click writes bytes here for binary echo; redacted the same way
        return _RedactingBinary(self._stream.buffer) if hasattr(self._stream, "buffer") else None

    def __getattr__(self, name):
        return getattr(self._stream, name)


class _RedactingBinary(io.RawIOBase):
    def __init__(self, stream):
        self._stream = stream

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._stream.write(redact_bytes(bytes(data)))
        return len(data)

    def flush(self) -> None:
        self._stream.flush()


def install() -> None:
    """Wrap stdout and stderr so nothing printed carries a secret (once; idempotent)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _Redacting):
            setattr(sys, name, _Redacting(stream))


def every(values: Iterable[str]) -> list[str]:
    return [redact(v) for v in values]
