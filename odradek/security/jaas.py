"""Kafka's JAAS configuration parser (org.apache.kafka.common.security.JaasConfig) for
``sasl.jaas.config`` values::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

Kafka tokenizes with java.io.StreamTokenizer, and the quirks that users meet come from it, so
this module reproduces its rules rather than a grammar of our own:

- words are letters, ``-``, ``_``, ``$`` and (after the first character) digits and ``.``,
  so a class name is one word but ``key=123`` has no value (a number is not a word: quote it);
- values with anything else (``/``, ``:``, ``@``, spaces...) must be quoted, with ``"`` or
  ``'``; inside quotes ``\\n``, ``\\t``, ``\\"``, ``\\\\``, octal ``\\123``... are escapes and a
  line break ends the string;
- ``//`` and ``/* */`` are comments, and so is a lone ``/`` (to the end of the line).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
KRB5_LOGIN_MODULE = "com.sun.security.auth.module.Krb5LoginModule"

# The login module each mechanism's documentation configures (for messages and checks).
LOGIN_MODULES = {
    "PLAIN": PLAIN_LOGIN_MODULE,
    "SCRAM-SHA-256": SCRAM_LOGIN_MODULE,
    "SCRAM-SHA-512": SCRAM_LOGIN_MODULE,
    "OAUTHBEARER": OAUTHBEARER_LOGIN_MODULE,
    "GSSAPI": KRB5_LOGIN_MODULE,
}

CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")

# JaasUtils.DISALLOWED_LOGIN_MODULES_DEFAULT (system property
# org.apache.kafka.disallowed.login.modules): JNDI lookups are a remote code execution vector.
DISALLOWED_LOGIN_MODULES_CONFIG = "org.apache.kafka.disallowed.login.modules"
DISALLOWED_LOGIN_MODULES_DEFAULT = ("com.sun.security.auth.module.JndiLoginModule",)


@dataclass(frozen=True, slots=True)
class JaasModule:
    """One login module entry: class name, control flag (lower case) and options."""

    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def login_module_for_mechanism(mechanism: str) -> str:
    """The login module Kafka's documentation uses for a SASL mechanism; ValueError for an
    unknown mechanism."""
    try:
        return LOGIN_MODULES[mechanism]
    except KeyError:
        raise ValueError(f"No login module is known for SASL mechanism {mechanism}") from None


def parse_jaas_config(
    text: str, disallowed_login_modules: Iterable[str] = DISALLOWED_LOGIN_MODULES_DEFAULT
) -> JaasModule:
    """A ``sasl.jaas.config`` value: exactly one login module (JaasContext.load's rule), not a
    disallowed one. Raises ValueError with Kafka's message."""
    modules = parse_jaas_entries(text)
    if len(modules) != 1:
        raise ValueError(
            f"JAAS config property contains {len(modules)} login modules, should be 1 module"
        )
    module = modules[0]
    name = module.login_module.strip()
    if name in {m.strip() for m in disallowed_login_modules}:
        raise ValueError(
            f"{name} is not allowed. Update System property '{DISALLOWED_LOGIN_MODULES_CONFIG}' "
            f"to allow {name}"
        )
    return module


def parse_jaas_entries(text: str) -> list[JaasModule]:
    """Every login module entry of a JAAS config text, as Kafka's JaasConfig constructor reads
    them (at least one). Raises ValueError with Kafka's messages."""
    tokenizer = _StreamTokenizer(text)
    entries = []
    while tokenizer.next_token() != _TT_EOF:
        entries.append(_parse_entry(tokenizer))
    if not entries:
        raise ValueError("Login module not specified in JAAS config")
    return entries


def _parse_entry(tokenizer: _StreamTokenizer) -> JaasModule:
    login_module = tokenizer.sval
    if tokenizer.next_token() == _TT_EOF:
        raise ValueError("Login module control flag not specified in JAAS config")
    flag = _control_flag(tokenizer.sval)
    options: dict[str, str] = {}
    while tokenizer.next_token() != _TT_EOF and tokenizer.ttype != _SEMICOLON:
        key = tokenizer.sval
        if (
            tokenizer.next_token() != _EQUALS
            or tokenizer.next_token() == _TT_EOF
            or tokenizer.sval is None
        ):
            raise ValueError(f"Value not specified for key '{_java_str(key)}' in JAAS config")
        if key is None:
            # Kafka would store the option under a null name (e.g. "5=x": 5 is a number token).
            raise ValueError(
                f"Option name not specified for value '{tokenizer.sval}' in JAAS config: "
                "option names must be words (or quoted)"
            )
        options[key] = tokenizer.sval
    if tokenizer.ttype != _SEMICOLON:
        raise ValueError("JAAS config entry not terminated by semi-colon")
    if not login_module:
        # javax.security.auth.login.AppConfigurationEntry refuses it (without a message).
        raise ValueError("Login module class name not specified in JAAS config")
    return JaasModule(login_module, flag, options)


def _control_flag(flag: str | None) -> str:
    if flag is None:
        raise ValueError("Login module control flag is not available in the JAAS config")
    # Java's toUpperCase(Locale.ROOT), compared with the four flag names.
    for control_flag in CONTROL_FLAGS:
        if flag.upper() == control_flag.upper():
            return control_flag
    raise ValueError(f"Invalid login module control flag '{flag}' in JAAS config")


def _java_str(value: str | None) -> str:
    return "null" if value is None else value


# --------------------------------------------------------------------------- StreamTokenizer

_TT_EOF = -1
_TT_NUMBER = -2
_TT_WORD = -3
_SEMICOLON = ord(";")
_EQUALS = ord("=")

_CT_WHITESPACE = 1
_CT_DIGIT = 2
_CT_ALPHA = 4
_CT_QUOTE = 8
_CT_COMMENT = 16


def _kafka_ctype_table() -> list[int]:
    """new StreamTokenizer(reader) with Kafka's settings (JaasConfig's constructor)."""
    ct = [0] * 256

    def word_chars(low: int, high: int) -> None:
        for c in range(low, high + 1):
            ct[c] |= _CT_ALPHA

    word_chars(ord("a"), ord("z"))
    word_chars(ord("A"), ord("Z"))
    word_chars(128 + 32, 255)
    for c in range(0, ord(" ") + 1):
        ct[c] = _CT_WHITESPACE
    ct[ord("/")] = _CT_COMMENT
    ct[ord('"')] = _CT_QUOTE
    ct[ord("'")] = _CT_QUOTE
    for c in "0123456789.-":  # parseNumbers()
        ct[ord(c)] |= _CT_DIGIT
    # Kafka: tokenizer.wordChars('-', '-'), ('_', '_'), ('$', '$').
    for c in "-_$":
        ct[ord(c)] |= _CT_ALPHA
    return ct


_CTYPE = _kafka_ctype_table()
_NEED_CHAR = -2  # "read the next character" (Java: Integer.MAX_VALUE); any negative works


class _StreamTokenizer:
    """java.io.StreamTokenizer.nextToken(), with slashSlashComments and slashStarComments on and
    end-of-line not significant; ``ttype`` and ``sval`` as in Java (sval is None for numbers
    and ordinary characters)."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._pos = 0
        self._peekc = _NEED_CHAR
        self.ttype = -4  # TT_NOTHING
        self.sval: str | None = None

    def _read(self) -> int:
        if self._pos >= len(self._text):
            return -1
        c = ord(self._text[self._pos])
        self._pos += 1
        return c

    @staticmethod
    def _ctype(c: int) -> int:
        return _CTYPE[c] if c < 256 else _CT_ALPHA

    def next_token(self) -> int:
        # Java recurses after a comment; a loop does the same.
        while True:
            token = self._next_token_once()
            if token is not None:
                return token

    def _next_token_once(self) -> int | None:
        self.sval = None
        c = self._peekc
        if c < 0:  # nothing pushed back (or end of input, which reading again reports)
            c = self._read()
            if c < 0:
                self.ttype = _TT_EOF
                return _TT_EOF
        self.ttype = c
        self._peekc = _NEED_CHAR

        ctype = self._ctype(c)
        while ctype & _CT_WHITESPACE:
            if c == ord("\r"):
                c = self._read()
                if c == ord("\n"):
                    c = self._read()
            else:
                c = self._read()
            if c < 0:
                self.ttype = _TT_EOF
                return _TT_EOF
            ctype = self._ctype(c)

        if ctype & _CT_DIGIT:
            if c == ord("-"):
                c = self._read()
                if c != ord(".") and not ord("0") <= c <= ord("9"):
                    self._peekc = c
                    self.ttype = ord("-")
                    return self.ttype
            seen_dot = False
            while True:
                if c == ord(".") and not seen_dot:
                    seen_dot = True
                elif not ord("0") <= c <= ord("9"):
                    break
                c = self._read()
            self._peekc = c
            self.ttype = _TT_NUMBER
            return _TT_NUMBER

        if ctype & _CT_ALPHA:
            chars = []
            while True:
                chars.append(chr(c))
                c = self._read()
                ctype = _CT_WHITESPACE if c < 0 else self._ctype(c)
                if not ctype & (_CT_ALPHA | _CT_DIGIT):
                    break
            self._peekc = c
            self.sval = "".join(chars)
            self.ttype = _TT_WORD
            return _TT_WORD

        if ctype & _CT_QUOTE:
            quote = c
            self.ttype = quote
            chars = []
            d = self._read()
            while d >= 0 and d != quote and d != ord("\n") and d != ord("\r"):
                if d == ord("\\"):
                    c = self._read()
                    first = c  # \377 is one octal escape, \477 is \47 then "7"
                    if ord("0") <= c <= ord("7"):
                        c -= ord("0")
                        c2 = self._read()
                        if ord("0") <= c2 <= ord("7"):
                            c = (c << 3) + (c2 - ord("0"))
                            c2 = self._read()
                            if ord("0") <= c2 <= ord("7") and first <= ord("3"):
                                c = (c << 3) + (c2 - ord("0"))
                                d = self._read()
                            else:
                                d = c2
                        else:
                            d = c2
                    else:
                        c = _ESCAPES.get(c, c)
                        d = self._read()
                else:
                    c = d
                    d = self._read()
                chars.append(chr(c & 0xFFFF))  # Java's (char) cast: EOF after "\" is U+FFFF
            self._peekc = _NEED_CHAR if d == quote else d
            self.sval = "".join(chars)
            return quote

        if c == ord("/"):
            c = self._read()
            if c == ord("*"):
                prevc = 0
                while True:
                    c = self._read()
                    if c == ord("/") and prevc == ord("*"):
                        break
                    if c == ord("\r"):
                        c = self._read()
                        if c == ord("\n"):
                            c = self._read()
                    elif c == ord("\n"):
                        c = self._read()
                    if c < 0:
                        self.ttype = _TT_EOF
                        return _TT_EOF
                    prevc = c
                return None
            if c == ord("/"):
                self._skip_line()
                return None
            # "/" is also a comment character (StreamTokenizer's default): to the end of line.
            self._skip_line()
            return None

        if ctype & _CT_COMMENT:
            self._skip_line()
            return None

        self.ttype = c
        return c

    def _skip_line(self) -> None:
        while True:
            c = self._read()
            if c == ord("\n") or c == ord("\r") or c < 0:
                break
        self._peekc = c


_ESCAPES = {
    ord("a"): 0x7,
    ord("b"): 0x8,
    ord("f"): 0xC,
    ord("n"): 0xA,
    ord("r"): 0xD,
    ord("t"): 0x9,
    ord("v"): 0xB,
}
