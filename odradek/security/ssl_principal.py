"""The principal of a TLS client, from its certificate, as Kafka names it.

Kafka's DefaultKafkaPrincipalBuilder takes the subject of the client's certificate as Java's
``X500Principal.getName()`` prints it (RFC 2253, e.g. ``CN=alice,OU=eng,O=Odradek,C=US``) and
passes it through ``ssl.principal.mapping.rules`` (SslPrincipalMapper). ACLs are written
against the result, so both steps follow Java character for character:

- :func:`distinguished_name` reads the subject from the certificate's DER itself (not through a
  library's own DN printer), because Java's output depends on the order of the encoding, the
  ASN.1 string type of each value and Java's particular escaping.
- :class:`SslPrincipalMapper` parses the rules with Kafka's own rule grammar, translates each
  Java regular expression to Python's ``re`` and applies it with Java's ``matches()`` and
  ``replaceAll()`` semantics (which differ from ``re.sub`` on empty matches and ``$n``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from odradek.security.principal import ANONYMOUS

__all__ = [
    "DEFAULT_SSL_PRINCIPAL_MAPPING_RULES",
    "NoMatchingRule",
    "SslPrincipalMapper",
    "distinguished_name",
    "java_regex",
    "ssl_principal_name",
]

DEFAULT_SSL_PRINCIPAL_MAPPING_RULES = "DEFAULT"  # BrokerSecurityConfigs

# ---------------------------------------------------------------------------------------------
# The subject DN, as Java's X500Principal.getName() (RFC 2253) prints it
# ---------------------------------------------------------------------------------------------

# The attribute types Java's AVAKeyword marks RFC 2253 compliant; every other type is printed
# as its dotted OID with a #hex value (so emailAddress is "1.2.840.113549.1.9.1=#16...").
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}

# ASN.1 universal tags Java's AVA.isDerString() treats as strings: PrintableString, T61String,
# IA5String, GeneralString, BMPString, UTF8String. Others (NumericString, VisibleString,
# UniversalString, ...) are printed as #hex even under a keyword.
_DER_STRING_TAGS = frozenset({0x13, 0x14, 0x16, 0x1B, 0x1E, 0x0C})

_SEQUENCE = 0x30
_SET = 0x31
_OID = 0x06

_ESCAPEES = ',=+<>#;"\\'  # Java escapes '=' and '#' anywhere, beyond RFC 2253's list


class _Der:
    """Just enough of a DER reader for a certificate's subject Name."""

    @staticmethod
    def read(data: bytes, pos: int, end: int) -> tuple[int, int, int, int]:
        """The element at ``pos``: (tag, start of contents, end of contents, start of tag)."""
        if pos + 2 > end:
            raise ValueError("truncated DER element")
        start = pos
        tag = data[pos]
        pos += 1
        if tag & 0x1F == 0x1F:  # high tag number form: skip its base-128 continuation bytes
            while pos < end and data[pos] & 0x80:
                pos += 1
            pos += 1
        if pos >= end:
            raise ValueError("truncated DER element")
        length = data[pos]
        pos += 1
        if length & 0x80:
            count = length & 0x7F
            if count == 0 or count > 4 or pos + count > end:
                raise ValueError("unsupported DER length")
            length = int.from_bytes(data[pos : pos + count], "big")
            pos += count
        if pos + length > end:
            raise ValueError("truncated DER element")
        return tag, pos, pos + length, start

    @staticmethod
    def children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
        out = []
        pos = start
        while pos < end:
            element = _Der.read(data, pos, end)
            out.append(element)
            pos = element[2]
        return out

    @staticmethod
    def oid(content: bytes) -> str:
        if not content:
            raise ValueError("empty OID")
        arcs: list[int] = []
        value = 0
        for byte in content:
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                arcs.append(value)
                value = 0
        first = arcs[0]
        head = [0, first] if first < 40 else [1, first - 40] if first < 80 else [2, first - 80]
        return ".".join(str(arc) for arc in head + arcs[1:])

    @staticmethod
    def encode_length(length: int) -> bytes:
        if length < 0x80:
            return bytes([length])
        body = length.to_bytes((length.bit_length() + 7) // 8, "big")
        return bytes([0x80 | len(body)]) + body


def _subject_name(der_certificate: bytes) -> tuple[bytes, int, int]:
    """(data, start, end) of the subject Name's contents inside a certificate."""
    data = bytes(der_certificate)
    tag, start, end, _ = _Der.read(data, 0, len(data))
    if tag != _SEQUENCE:
        raise ValueError("not a DER X.509 certificate")
    tag, start, end, _ = _Der.read(data, start, end)  # tbsCertificate
    if tag != _SEQUENCE:
        raise ValueError("not a DER X.509 certificate")
    fields = _Der.children(data, start, end)
    if fields and fields[0][0] == 0xA0:  # [0] EXPLICIT version
        fields = fields[1:]
    # serialNumber, signature, issuer, validity, subject
    if len(fields) < 5 or fields[4][0] != _SEQUENCE:
        raise ValueError("not a DER X.509 certificate")
    _, start, end, _ = fields[4]
    return data, start, end


def _rfc2253_value(content: bytes) -> str:
    # Java decodes the contents as UTF-8 whatever the string type (so a BMPString's UTF-16
    # zero bytes come out as "\00"), escapes its escapees and NUL, keeps all else verbatim.
    text = content.decode("utf-8", errors="replace")
    buf: list[str] = []
    for c in text:
        if c in _ESCAPEES:
            buf.append("\\" + c)
        elif c == "\x00":
            buf.append("\\00")
        else:
            buf.append(c)
    chars = "".join(buf)
    # Then leading and trailing spaces (and CRs) of the escaped text get a backslash each.
    lead = 0
    while lead < len(chars) and chars[lead] in " \r":
        lead += 1
    trail = len(chars) - 1
    while trail >= 0 and chars[trail] in " \r":
        trail -= 1
    return "".join("\\" + c if i < lead or i > trail else c for i, c in enumerate(chars))


def _rfc2253_ava(data: bytes, start: int, end: int) -> str:
    parts = _Der.children(data, start, end)
    if len(parts) != 2 or parts[0][0] != _OID:
        raise ValueError("malformed AttributeTypeAndValue")
    oid = _Der.oid(data[parts[0][1] : parts[0][2]])
    tag, vstart, vend, vtag_start = parts[1]
    keyword = _RFC2253_KEYWORDS.get(oid)
    if keyword is None or tag not in _DER_STRING_TAGS:
        # '#' and the lowercase hex of the value's DER re-encoding (tag, minimal length, body)
        # (a non-minimal length in the input comes out minimal, as Java's DerValue has it)
        body = data[vstart:vend]
        tag_bytes = data[vtag_start : vtag_start + _tag_length(data, vtag_start)]
        der = tag_bytes + _Der.encode_length(len(body)) + body
        return f"{keyword or oid}=#{der.hex()}"
    return f"{keyword}={_rfc2253_value(data[vstart:vend])}"


def _tag_length(data: bytes, pos: int) -> int:
    if data[pos] & 0x1F != 0x1F:
        return 1
    n = pos + 1
    while data[n] & 0x80:
        n += 1
    return n + 1 - pos


def distinguished_name(der_certificate: bytes) -> str:
    """The certificate's subject as Java's ``X500Principal.getName()`` prints it (RFC 2253):
    RDNs most specific first, multi-valued RDNs joined with ``+`` in their encoded order,
    keywords CN C L ST O OU STREET DC UID and dotted OIDs with ``#hex`` values otherwise.

    Raises ValueError for bytes that are not a DER certificate."""
    data, start, end = _subject_name(der_certificate)
    rdns: list[str] = []
    for tag, rstart, rend, _ in _Der.children(data, start, end):
        if tag != _SET:
            raise ValueError("malformed RelativeDistinguishedName")
        avas = []
        for atag, astart, aend, _ in _Der.children(data, rstart, rend):
            if atag != _SEQUENCE:
                raise ValueError("malformed AttributeTypeAndValue")
            avas.append(_rfc2253_ava(data, astart, aend))
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


# ---------------------------------------------------------------------------------------------
# Java regular expressions, in Python's re
# ---------------------------------------------------------------------------------------------

_POSIX_CLASSES = {  # \p{...} as Java defines them (US-ASCII only, its default)
    "Lower": "a-z",
    "Upper": "A-Z",
    "ASCII": "\\x00-\\x7f",
    "Alpha": "a-zA-Z",
    "Digit": "0-9",
    "Alnum": "a-zA-Z0-9",
    "Punct": "!-/:-@\\[-`{-~",
    "Graph": "!-~",
    "Print": " -~",
    "Blank": " \\t",
    "Cntrl": "\\x00-\\x1f\\x7f",
    "XDigit": "0-9a-fA-F",
    "Space": " \\t\\n\\x0b\\f\\r",
}
_HORIZONTAL_SPACE = " \\t\\xa0\\u1680\\u180e\\u2000-\\u200a\\u202f\\u205f\\u3000"
_VERTICAL_SPACE = "\\n\\x0b\\f\\r\\x85\\u2028\\u2029"
_JAVA_FLAGS = "imsx"  # Java's d (UNIX_LINES), u, U and c have no equivalent in re


class _JavaRegexTranslator:
    """Rewrites the Java regex constructs that Python's ``re`` spells differently or lacks.

    Handled: \\Q..\\E quoting, \\z \\Z \\h \\H \\v \\V \\R \\e \\cX \\0ooo \\x{h..h},
    POSIX \\p{Alpha}-style classes, named groups (?<name>..) and \\k<name>, Java's rule for
    multi-digit back references, nested class unions [a[bc]], and inline flags in mid-pattern
    (Python 3.11 only takes global flags at the start: they become scoped groups). Possessive
    quantifiers and atomic groups need no change on Python 3.11. Anything else Java-only
    (class intersections, Unicode script properties, \\G, ...) raises ValueError."""

    def __init__(self, pattern: str) -> None:
        self.src = pattern
        self.pos = 0
        self.out: list[str] = []
        self.groups = 0
        self.depth = 0
        # per group depth: the flag groups opened there by a mid-pattern (?flags)
        self.scoped: list[list[str]] = [[]]

    def fail(self, what: str) -> ValueError:
        return ValueError(f"unsupported Java regex construct {what} in {self.src!r}")

    def translate(self) -> str:
        src = self.src
        while self.pos < len(src):
            c = src[self.pos]
            if c == "\\":
                self.out.append(self.escape(in_class=False))
            elif c == "[":
                self.out.append(self.char_class())
            elif c == "(":
                self.open_group()
            elif c == ")":
                self.close_scoped()
                self.out.append(")")
                self.depth -= 1
                if self.depth < 0:
                    raise ValueError(f"unbalanced ')' in {src!r}")
                self.scoped.pop()
                self.pos += 1
            elif c == "|":
                reopen = self.scoped[-1]
                self.close_scoped()
                self.out.append("|")
                for flags in reopen:
                    self.out.append(f"(?{flags}:")
                self.scoped[-1] = list(reopen)
                self.pos += 1
            else:
                self.out.append(c)
                self.pos += 1
        self.close_scoped()
        return "".join(self.out)

    def close_scoped(self) -> None:
        self.out.append(")" * len(self.scoped[-1]))
        self.scoped[-1] = []

    def open_group(self) -> None:
        src = self.src
        rest = src[self.pos :]
        flags = re.match(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?([:)])", rest)
        if flags and (flags.group(1) or flags.group(2) is not None):
            on, off, end = flags.group(1), flags.group(2) or "", flags.group(3)
            for f in on + off:
                if f not in _JAVA_FLAGS or f == "x":
                    raise self.fail(f"(?{f}) (flag {f!r})")
            spec = on + (f"-{off}" if off else "")
            self.pos += flags.end()
            if end == ":":  # (?i:...) is the same in both
                self.out.append(f"(?{spec}:")
                self.depth += 1
                self.scoped.append([])
            elif spec:  # (?i) mid-pattern: scope it to the rest of the enclosing group
                self.out.append(f"(?{spec}:")
                self.scoped[-1].append(spec)
            return
        self.depth += 1
        self.scoped.append([])
        named = re.match(r"\(\?<([a-zA-Z][a-zA-Z0-9]*)>", rest)
        if named:
            self.groups += 1
            self.out.append(f"(?P<{named.group(1)}>")
            self.pos += named.end()
        elif rest.startswith("(?"):
            head = rest[:4]
            for prefix in ("(?:", "(?=", "(?!", "(?<=", "(?<!", "(?>"):
                if head.startswith(prefix):
                    self.out.append(prefix)
                    self.pos += len(prefix)
                    return
            raise self.fail(repr(rest[:4]))
        else:
            self.groups += 1
            self.out.append("(")
            self.pos += 1

    def escape(self, in_class: bool) -> str:
        src = self.src
        if self.pos + 1 >= len(src):
            raise ValueError(f"trailing backslash in {src!r}")
        c = src[self.pos + 1]
        self.pos += 2
        if c == "Q":
            end = src.find("\\E", self.pos)
            literal = src[self.pos :] if end < 0 else src[self.pos : end]
            self.pos = len(src) if end < 0 else end + 2
            return "".join(_escape_literal(ch) for ch in literal)
        if c == "E":
            return ""  # a \E without \Q is ignored by Java
        if c in "pP":
            return self.property(negated=c == "P", in_class=in_class)
        simple = {
            "h": f"[{_HORIZONTAL_SPACE}]",
            "H": f"[^{_HORIZONTAL_SPACE}]",
            "v": f"[{_VERTICAL_SPACE}]",
            "V": f"[^{_VERTICAL_SPACE}]",
        }
        if c in simple:
            if in_class:
                if c in "HV":
                    raise self.fail(f"\\{c} inside a character class")
                return _HORIZONTAL_SPACE if c == "h" else _VERTICAL_SPACE
            return simple[c]
        if c == "e":
            return "\\x1b"
        if c == "c":
            if self.pos >= len(src):
                raise ValueError(f"illegal control escape in {src!r}")
            ch = src[self.pos]
            self.pos += 1
            return _escape_literal(chr(ord(ch) ^ 64))
        if c == "0":
            m = re.match(r"[0-3][0-7]{2}|[0-7]{1,2}", src[self.pos :])
            if not m:
                raise ValueError(f"illegal octal escape in {src!r}")
            self.pos += m.end()
            return _escape_literal(chr(int(m.group(), 8)))
        if c == "x" and src.startswith("{", self.pos):
            end = src.find("}", self.pos)
            if end < 0:
                raise ValueError(f"unclosed hexadecimal escape in {src!r}")
            value = int(src[self.pos + 1 : end], 16)
            self.pos = end + 1
            return _escape_literal(chr(value))
        if in_class:
            if c in "RzZkGX" or c.isdigit():
                raise self.fail(f"\\{c} inside a character class")
            return "\\" + c
        if c == "R":
            return f"(?:\\r\\n|[{_VERTICAL_SPACE}])"
        if c == "z":
            return "\\Z"
        if c == "Z":
            return "(?=(?:\\r\\n|[\\n\\r\\x85\\u2028\\u2029])?\\Z)"
        if c == "k":
            m = re.match(r"<([a-zA-Z][a-zA-Z0-9]*)>", src[self.pos :])
            if not m:
                raise ValueError(f"illegal named back reference in {src!r}")
            self.pos += m.end()
            return f"(?P={m.group(1)})"
        if c in "GX":
            raise self.fail(f"\\{c}")
        if c.isdigit():
            # Java reads more digits only while they still name an existing group
            ref = int(c)
            while self.pos < len(src) and src[self.pos].isdigit():
                longer = ref * 10 + int(src[self.pos])
                if longer > self.groups:
                    break
                ref = longer
                self.pos += 1
            return f"(?:\\{ref})"
        return "\\" + c

    def property(self, negated: bool, in_class: bool) -> str:
        src = self.src
        if src.startswith("{", self.pos):
            end = src.find("}", self.pos)
            if end < 0:
                raise ValueError(f"unclosed property in {src!r}")
            name = src[self.pos + 1 : end]
            self.pos = end + 1
        else:
            name = src[self.pos : self.pos + 1]
            self.pos += 1
        body = _POSIX_CLASSES.get(name.removeprefix("Is"))
        if body is None:
            raise self.fail(f"\\p{{{name}}}")
        if in_class:
            if negated:
                raise self.fail(f"\\P{{{name}}} inside a character class")
            return body
        return f"[{'^' if negated else ''}{body}]"

    def char_class(self) -> str:
        """A [...] class from self.pos, as one Python class (nested unions flattened)."""
        src = self.src
        self.pos += 1
        parts = ["["]
        if src.startswith("^", self.pos):
            parts.append("^")
            self.pos += 1
        first = True
        while True:
            if self.pos >= len(src):
                raise ValueError(f"unclosed character class in {src!r}")
            c = src[self.pos]
            if c == "]" and not first:
                self.pos += 1
                break
            if c == "\\":
                parts.append(self.escape(in_class=True))
            elif c == "[":
                if src.startswith("[^", self.pos):
                    raise self.fail("nested negated class [^...] inside a class")
                nested = self.char_class()
                parts.append(nested[1:-1])
            elif c == "&" and src.startswith("&&", self.pos):
                raise self.fail("class intersection &&")
            elif c in "&~|":
                parts.append("\\" + c)  # Python reserves doubled ones for set operations
                self.pos += 1
            else:
                parts.append(c)
                self.pos += 1
            first = False
        parts.append("]")
        return "".join(parts)


def _escape_literal(ch: str) -> str:
    return re.escape(ch) if ch.isprintable() else f"\\U{ord(ch):08x}"


def java_regex(pattern: str) -> re.Pattern[str]:
    """Compiles a Java regular expression (java.util.regex syntax) for Python's ``re``.
    ``re.ASCII`` gives Java's defaults for \\w \\d \\s \\b and case-insensitive matching.
    Raises ValueError for syntax errors and Java-only constructs."""
    translated = _JavaRegexTranslator(pattern).translate()
    try:
        return re.compile(translated, re.ASCII)
    except re.error as e:
        raise ValueError(f"invalid regular expression {pattern!r}: {e}") from None


def _java_find_all(pattern: re.Pattern[str], text: str) -> list[re.Match[str]]:
    """The matches Java's Matcher.find() loop visits. After an empty match it resumes one
    character later, so (unlike re.finditer) no non-empty match may start where it was."""
    matches = []
    pos = 0
    previous_empty_at = -1
    while pos <= len(text):
        start = pos + 1 if pos == previous_empty_at else pos
        if start > len(text):
            break
        m = pattern.search(text, start)
        if m is None:
            break
        matches.append(m)
        pos = m.end()
        previous_empty_at = m.start() if m.start() == m.end() else -1
    return matches


def _parse_java_replacement(
    replacement: str, groups: int, names: Mapping[str, int]
) -> list[str | int]:
    """Java's Matcher.appendReplacement() syntax: ``\\x`` is a literal x, ``$n`` group n (more
    digits only while the number still names a group), ``${name}`` a named group."""
    pieces: list[str | int] = []  # literals, and numbers of the groups to copy
    literal: list[str] = []
    i = 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\":
            i += 1
            if i == len(replacement):
                raise ValueError("character to be escaped is missing")
            literal.append(replacement[i])
            i += 1
        elif c == "$":
            i += 1
            if i == len(replacement):
                raise ValueError("Illegal group reference: group index is missing")
            if replacement[i] == "{":
                end = replacement.find("}", i)
                name = replacement[i + 1 : end] if end > 0 else ""
                if end < 0 or not re.fullmatch(r"[a-zA-Z][a-zA-Z0-9]*", name):
                    raise ValueError("named capturing group is missing trailing '}'")
                if name not in names:
                    raise ValueError(f"No group with name {{{name}}}")
                i = end + 1
                ref: int = names[name]
            else:
                if replacement[i] not in "0123456789":
                    raise ValueError("Illegal group reference")
                ref = int(replacement[i])
                i += 1
                while i < len(replacement) and replacement[i] in "0123456789":
                    longer = ref * 10 + int(replacement[i])
                    if longer > groups:
                        break
                    ref = longer
                    i += 1
                if ref > groups:
                    raise ValueError(f"No group {ref}")
            if literal:
                pieces.append("".join(literal))
                literal = []
            pieces.append(ref)
        else:
            literal.append(c)
            i += 1
    if literal:
        pieces.append("".join(literal))
    return pieces


_BACK_REFERENCE = re.compile(r"\$(\d+)", re.ASCII)


def _escape_literal_back_references(unescaped: str, groups: int) -> str:
    """Kafka's Rule.escapeLiteralBackReferences (from Apache NiFi): a ``$n`` naming no group is
    made literal (``$123`` with 12 groups means group 12 then "3"). Ported as is, including
    its use of the original string's offsets after an earlier insertion shifted them."""
    if groups == 0:
        return unescaped
    value = unescaped
    for m in _BACK_REFERENCE.finditer(unescaped):
        number = m.group(1)
        if number.startswith("0"):
            continue
        index = int(number)
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            group_start = m.start(1)
            value = value[: group_start - 1] + "\\" + value[group_start - 1 :]
    return value


class _Rule:
    """One entry of ssl.principal.mapping.rules: DEFAULT, or RULE:pattern/replacement/[LU].
    The pattern and replacement are checked here, so a bad one fails at start-up."""

    __slots__ = ("_pattern", "_pieces", "is_default", "pattern_text", "replacement", "to_lower",
                 "to_upper")  # fmt: skip

    def __init__(
        self,
        pattern_text: str | None = None,
        replacement: str | None = None,
        to_lower: bool = False,
        to_upper: bool = False,
    ) -> None:
        self.is_default = pattern_text is None
        self.pattern_text = pattern_text
        self.replacement = replacement
        self.to_lower = to_lower
        self.to_upper = to_upper
        self._pattern: re.Pattern[str] | None = None
        self._pieces: list[str | int] = []
        if pattern_text is None:
            return
        try:
            self._pattern = java_regex(pattern_text)
            groups = self._pattern.groups
            escaped = _escape_literal_back_references(replacement or "", groups)
            self._pieces = _parse_java_replacement(escaped, groups, self._pattern.groupindex)
        except ValueError as e:
            raise ValueError(f"Invalid rule: `{self}`: {e}") from None

    def apply(self, distinguished_name: str) -> str | None:
        pattern = self._pattern
        if pattern is None:  # DEFAULT
            return distinguished_name
        if pattern.fullmatch(distinguished_name) is None:  # Java's Matcher.matches()
            return None
        # then String.replaceAll(pattern, replacement) over the whole DN
        out: list[str] = []
        last = 0
        for m in _java_find_all(pattern, distinguished_name):
            out.append(distinguished_name[last : m.start()])
            for piece in self._pieces:
                out.append(piece if isinstance(piece, str) else m.group(piece) or "")
            last = m.end()
        out.append(distinguished_name[last:])
        result = "".join(out)
        if self.to_lower:
            return result.lower()
        if self.to_upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.is_default:
            return "DEFAULT"
        text = f"RULE:{self.pattern_text}"
        if self.replacement is not None:
            text += f"/{self.replacement}"
        if self.to_lower:
            text += "/L"
        elif self.to_upper:
            text += "/U"
        return text


# Kafka's SslPrincipalMapper grammar, verbatim: group 1 DEFAULT, 2 the pattern, 4 the
# replacement, 6 the case flag; the last alternative swallows anything else for the error.
_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)", re.ASCII)
_RULE_PARSER = re.compile(_RULE_PATTERN, re.ASCII)
_JAVA_TRIM = "".join(chr(i) for i in range(33))  # String.trim() strips every char <= ' '


class NoMatchingRule(Exception):  # Kafka's name: SslPrincipalMapper.NoMatchingRule
    """No rule of ssl.principal.mapping.rules applied to the DN: Kafka fails the
    authentication ("Failed to map name for ... based on SSL principal mapping rules")."""


class SslPrincipalMapper:
    """ssl.principal.mapping.rules: ``RULE:pattern/replacement/[LU], ..., DEFAULT``, tried in
    order; the first rule whose pattern matches the whole DN gives the name."""

    def __init__(self, rules: list[_Rule]) -> None:
        self._rules = rules

    @classmethod
    def from_rules(cls, rules: str | None) -> SslPrincipalMapper:
        """Parses the setting (None means Kafka's default, "DEFAULT"). Raises ValueError with
        the offending rule for a malformed one, as Kafka does at start-up."""
        if rules is None:
            rules = DEFAULT_SSL_PRINCIPAL_MAPPING_RULES
        parsed: list[_Rule] = []
        for rule in _java_split_rules(rules.strip(_JAVA_TRIM)):
            m = _RULE_PARSER.match(rule)
            assert m is not None  # the last alternative matches the empty string
            if m.end() != len(rule):
                raise ValueError(
                    f"Invalid rule: `{rule}`, unmatched substring: `{rule[m.end() :]}`"
                )
            if m.group(1) is not None:
                parsed.append(_Rule())
            elif m.group(2) is not None:
                parsed.append(
                    _Rule(
                        pattern_text=m.group(2),
                        replacement=m.group(4),
                        to_lower=m.group(6) == "L",
                        to_upper=m.group(6) == "U",
                    )
                )
            # an empty rule (",,") is ignored
        return cls(parsed)

    def name(self, distinguished_name: str) -> str:
        """The principal name for a DN; raises NoMatchingRule when no rule applies."""
        for rule in self._rules:
            result = rule.apply(distinguished_name)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules {self._rules_text()}")

    def _rules_text(self) -> str:
        return "[" + ", ".join(str(rule) for rule in self._rules) + "]"

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = {self._rules_text()})"

    __repr__ = __str__


def _java_split_rules(rules: str) -> list[str]:
    return [m.group(1) for m in _java_find_all(_RULE_SPLITTER, rules)]


def ssl_principal_name(der_certificate: bytes | None, mapper: SslPrincipalMapper) -> str:
    """The principal name of a TLS client: "ANONYMOUS" when it sent no certificate, else its
    certificate's DN through the mapping rules (Kafka's DefaultKafkaPrincipalBuilder)."""
    if not der_certificate:
        return ANONYMOUS.name
    return mapper.name(distinguished_name(der_certificate))
