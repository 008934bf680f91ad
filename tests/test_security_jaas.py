"""Kafka's JAAS config parser (odradek.security.jaas).

The tokenizer is checked token for token against the JDK's own java.io.StreamTokenizer (set up
as Kafka's JaasConfig sets it up) when a JDK is installed; the parser's rules and messages
against Kafka's JaasConfig / JaasContext by hand."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from odradek.security.jaas import (
    KRB5_LOGIN_MODULE,
    OAUTHBEARER_LOGIN_MODULE,
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasModule,
    _StreamTokenizer,
    login_module_for_mechanism,
    parse_jaas_config,
    parse_jaas_entries,
)

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


# --------------------------------------------------------------------------- parsing


def test_broker_plain_config_from_kafka_docs() -> None:
    module = parse_jaas_config(
        f'{PLAIN} required\n  username="admin"\n  password="admin-secret"\n'
        '  user_admin="admin-secret"\n  user_alice="alice-secret";\n'
    )
    assert module == JaasModule(
        PLAIN,
        "required",
        {
            "username": "admin",
            "password": "admin-secret",
            "user_admin": "admin-secret",
            "user_alice": "alice-secret",
        },
    )


def test_bare_words_and_both_quote_characters() -> None:
    module = parse_jaas_config(
        "org.apache.kafka.common.security.scram.ScramLoginModule REQUIRED "
        "username=alice password='x y' tokenauth=true k_2$=v.1-2;"
    )
    assert module.flag == "required"  # Kafka upper-cases the flag to compare it
    assert module.options == {
        "username": "alice",
        "password": "x y",
        "tokenauth": "true",
        "k_2$": "v.1-2",
    }


@pytest.mark.parametrize("flag", ["required", "Requisite", "SUFFICIENT", "optional"])
def test_control_flags(flag: str) -> None:
    assert parse_jaas_config(f"x.Y {flag};").flag == flag.lower()


def test_escapes_in_quoted_values() -> None:
    module = parse_jaas_config(
        r'm required a="q\"uote" b="back\\slash" c="tab\tnl\n" d="\101\60\0" e="\477" '
        r"f='it\'s';"
    )
    assert module.options == {
        "a": 'q"uote',
        "b": "back\\slash",
        "c": "tab\tnl\n",
        "d": "A0\x00",  # octal escapes
        "e": "'7",  # \477 is \47 then "7": only \0-\377 are one escape
        "f": "it's",
    }


def test_comments_everywhere() -> None:
    module = parse_jaas_config(
        "// leading comment\n"
        "/* block\n comment */ x.Y /* between */ required // trailing\n"
        'a="1" /* inside */ b="2"; // after'
    )
    assert module == JaasModule("x.Y", "required", {"a": "1", "b": "2"})


def test_lone_slash_starts_a_line_comment() -> None:
    # StreamTokenizer's default comment character is '/': an unquoted path eats the line.
    with pytest.raises(ValueError, match="Value not specified for key 'file' in JAAS config"):
        parse_jaas_config("x.Y required file=/tmp/jwks.json;")
    module = parse_jaas_config('x.Y required file="/tmp/jwks.json";')
    assert module.options == {"file": "/tmp/jwks.json"}


def test_unquoted_number_is_not_a_value() -> None:
    # Kafka's well-known trap: 123 is a TT_NUMBER token, whose sval is null.
    with pytest.raises(ValueError, match="Value not specified for key 'iterations' in JAAS"):
        parse_jaas_config("x.Y required iterations=4096;")
    assert parse_jaas_config('x.Y required iterations="4096";').options == {"iterations": "4096"}


def test_value_starting_with_a_dash_is_not_a_value() -> None:
    with pytest.raises(ValueError, match="Value not specified for key 'k'"):
        parse_jaas_config("x.Y required k=-abc;")


def test_words_may_continue_with_digits_and_dots() -> None:
    module = parse_jaas_config("a1.b2 required k9=v9.0;")
    assert module == JaasModule("a1.b2", "required", {"k9": "v9.0"})


def test_duplicate_key_last_wins() -> None:
    assert parse_jaas_config('x required a="1" a="2";').options == {"a": "2"}


def test_unterminated_quote_ends_at_line_break() -> None:
    # The string stops at the newline, which then separates tokens as whitespace.
    module = parse_jaas_config('x required a="abc\n b="d";')
    assert module.options == {"a": "abc", "b": "d"}


def test_quoted_login_module_name_is_accepted() -> None:
    # Kafka reads tokenizer.sval: a quoted class name has one.
    assert parse_jaas_config('"a.B" required;').login_module == "a.B"


def test_non_ascii_letters_are_word_characters() -> None:
    module = parse_jaas_config("x required user_jos\u00e9=caf\u00e9 k=\u4e2d\u6587;")
    assert module.options == {"user_jos\u00e9": "caf\u00e9", "k": "\u4e2d\u6587"}


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Login module not specified in JAAS config"),
        ("   // only a comment", "Login module not specified in JAAS config"),
        ("x.Y", "Login module control flag not specified in JAAS config"),
        ("x.Y ;", "Login module control flag is not available in the JAAS config"),
        ("x.Y 12;", "Login module control flag is not available in the JAAS config"),
        ("x.Y mandatory;", "Invalid login module control flag 'mandatory' in JAAS config"),
        ("x.Y required", "JAAS config entry not terminated by semi-colon"),
        ('x.Y required a="b"', "JAAS config entry not terminated by semi-colon"),
        ("x.Y required a;", "Value not specified for key 'a' in JAAS config"),
        ("x.Y required a=;", "Value not specified for key 'a' in JAAS config"),
        ("x.Y required a=", "Value not specified for key 'a' in JAAS config"),
        ("x.Y required a b;", "Value not specified for key 'a' in JAAS config"),
        ("x.Y required =b;", "Value not specified for key 'null' in JAAS config"),
        ("x.Y required 5=b;", "Option name not specified for value 'b'"),
        ("7 required;", "Login module class name not specified in JAAS config"),
    ],
)
def test_errors_with_kafkas_messages(text: str, message: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        parse_jaas_config(text)
    assert str(excinfo.value).startswith(message)


def test_sasl_jaas_config_takes_exactly_one_module() -> None:
    text = "a.B required; c.D optional;"
    assert [m.login_module for m in parse_jaas_entries(text)] == ["a.B", "c.D"]
    with pytest.raises(ValueError) as excinfo:
        parse_jaas_config(text)
    assert str(excinfo.value) == "JAAS config property contains 2 login modules, should be 1 module"


def test_jndi_login_module_is_disallowed() -> None:
    with pytest.raises(ValueError) as excinfo:
        parse_jaas_config("com.sun.security.auth.module.JndiLoginModule required;")
    assert str(excinfo.value) == (
        "com.sun.security.auth.module.JndiLoginModule is not allowed. Update System property "
        "'org.apache.kafka.disallowed.login.modules' to allow "
        "com.sun.security.auth.module.JndiLoginModule"
    )
    # The list is configurable, as Kafka's system property.
    module = parse_jaas_config(
        "com.sun.security.auth.module.JndiLoginModule required;", disallowed_login_modules=()
    )
    assert module.login_module == "com.sun.security.auth.module.JndiLoginModule"
    with pytest.raises(ValueError, match=r"a\.B is not allowed"):
        parse_jaas_config("a.B required;", disallowed_login_modules=[" a.B "])


def test_login_module_for_mechanism() -> None:
    assert login_module_for_mechanism("PLAIN") == PLAIN_LOGIN_MODULE == PLAIN
    assert login_module_for_mechanism("SCRAM-SHA-256") == SCRAM_LOGIN_MODULE
    assert login_module_for_mechanism("SCRAM-SHA-512") == SCRAM_LOGIN_MODULE
    assert login_module_for_mechanism("OAUTHBEARER") == OAUTHBEARER_LOGIN_MODULE
    assert login_module_for_mechanism("GSSAPI") == KRB5_LOGIN_MODULE
    with pytest.raises(ValueError, match="No login module is known for SASL mechanism plain"):
        login_module_for_mechanism("plain")


# --------------------------------------------------------------------------- JDK oracle

_JAVA_TOKEN_DUMP = r"""
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;

public class TokenDump {
    public static void main(String[] args) throws Exception {
        for (String path : args) {
            String text = new String(Files.readAllBytes(Paths.get(path)), StandardCharsets.UTF_8);
            StreamTokenizer t = new StreamTokenizer(new StringReader(text));
            t.slashSlashComments(true);
            t.slashStarComments(true);
            t.wordChars('-', '-');
            t.wordChars('_', '_');
            t.wordChars('$', '$');
            StringBuilder sb = new StringBuilder();
            while (t.nextToken() != StreamTokenizer.TT_EOF) {
                sb.append(t.ttype).append(':');
                if (t.sval == null) {
                    sb.append('-');
                } else {
                    for (char ch : t.sval.toCharArray()) sb.append(String.format("%04x", (int) ch));
                }
                sb.append(' ');
            }
            System.out.println(sb);
        }
    }
}
"""


def _python_token_dump(text: str) -> str:
    tokenizer = _StreamTokenizer(text)
    out = []
    while tokenizer.next_token() != -1:
        if tokenizer.sval is None:
            sval = "-"
        else:
            units = tokenizer.sval.encode("utf-16-be")
            sval = "".join(f"{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2))
        out.append(f"{tokenizer.ttype}:{sval} ")
    return "".join(out)


_ALPHABET = [*"aZ09.-_$=;\"'\\/* \n\r\t,:@{}", "\u00e9", "\u0085", "\u00ff", "\u4e2d", "\x00"]


def _oracle_inputs() -> list[str]:
    rng = random.Random(20240917)  # fixed: the same inputs every run
    inputs = [
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="a";',
        "a /* x */ b // y\nc",
        "a /* x *\n/ b */ c",  # a newline inside "*/" hides the slash (Java's loop does)
        "a /\nb c\nd",  # a lone slash eats the rest of the NEXT line too
        "/* unterminated",
        '"unterminated \\',
        '"octal \\0\\12\\123\\400\\777\\8"',
        "'single \\a\\b\\f\\n\\r\\t\\v\\q'",
        "-.5 -x -- 1.2.3 .a 3e5 a-1",
        "x\r\ny\rz",
        "$a _b -c",
        "",
    ]
    for _ in range(400):
        size = rng.randint(0, 30)
        inputs.append("".join(rng.choice(_ALPHABET) for _ in range(size)))
    return inputs


@pytest.fixture(scope="module")
def java_token_dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    javac = shutil.which("javac")
    java = shutil.which("java")
    if javac is None or java is None:
        pytest.skip("no JDK installed: the StreamTokenizer oracle needs javac and java")
    directory = tmp_path_factory.mktemp("jaas_oracle")
    (directory / "TokenDump.java").write_text(_JAVA_TOKEN_DUMP)
    subprocess.run([javac, "TokenDump.java"], cwd=directory, check=True, timeout=120)
    return directory


def test_tokenizer_matches_javas_stream_tokenizer(java_token_dump: Path) -> None:
    inputs = _oracle_inputs()
    paths = []
    for index, text in enumerate(inputs):
        path = java_token_dump / f"input{index}.txt"
        path.write_bytes(text.encode("utf-8"))
        paths.append(str(path))
    result = subprocess.run(
        ["java", "-cp", str(java_token_dump), "TokenDump", *paths],
        capture_output=True,
        check=True,
        timeout=120,
    )
    java_lines = result.stdout.decode("utf-8").split("\n")[: len(inputs)]
    assert len(java_lines) == len(inputs)
    mismatches = [
        (text, expected, _python_token_dump(text))
        for text, expected in zip(inputs, java_lines, strict=True)
        if _python_token_dump(text) != expected
    ]
    assert mismatches == []
