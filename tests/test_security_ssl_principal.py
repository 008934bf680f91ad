"""The principal of a TLS client: its certificate's DN as Java prints it, through Kafka's
ssl.principal.mapping.rules.

Expected values marked "Java" were checked once against Java 17's X500Principal.getName() and
Kafka 3.9's SslPrincipalMapper run on the same inputs; the others come from Kafka's
SslPrincipalMapperTest."""

from __future__ import annotations

import pytest
from cryptography import x509
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID, ObjectIdentifier
from support.certs import CertificateAuthority, name

from odradek.security.ssl_principal import (
    NoMatchingRule,
    SslPrincipalMapper,
    distinguished_name,
    java_regex,
    ssl_principal_name,
)

# ---------------------------------------------------------------------------------------------
# Distinguished names
# ---------------------------------------------------------------------------------------------

A = x509.NameAttribute
RDN = x509.RelativeDistinguishedName


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority()


def dn_of(ca: CertificateAuthority, subject: x509.Name) -> str:
    return distinguished_name(ca.issue(subject=subject, dns_names=(), ip_addresses=()).der)


def single(*attributes: x509.NameAttribute) -> x509.Name:
    """A name of one-attribute RDNs, in encoding order (most significant first)."""
    return x509.Name([RDN([a]) for a in attributes])


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        (name(CN="alice", OU="eng", O="Odradek", C="US"), "CN=alice,OU=eng,O=Odradek,C=US"),
        (
            name(CN="alice", OU="eng", O="Odradek", L="Paris", ST="IdF", STREET="1 rue", C="FR"),
            "CN=alice,OU=eng,O=Odradek,L=Paris,ST=IdF,STREET=1 rue,C=FR",
        ),
        (name(CN="bob", DC="example", UID="u123"), "CN=bob,DC=example,UID=u123"),
        # Types without an RFC 2253 keyword in Java: dotted OID and the value's DER in hex
        (
            name(CN="bob", EMAIL="bob@example.com", SERIALNUMBER="42"),
            "CN=bob,1.2.840.113549.1.9.1=#160f626f62406578616d706c652e636f6d,2.5.4.5=#13023432",
        ),
        (
            single(
                A(NameOID.GIVEN_NAME, "Ann"),
                A(NameOID.SURNAME, "Lee"),
                A(NameOID.TITLE, "Dr"),
                A(NameOID.COMMON_NAME, "x"),
            ),
            "CN=x,2.5.4.12=#0c024472,2.5.4.4=#0c034c6565,2.5.4.42=#0c03416e6e",
        ),
        (single(A(ObjectIdentifier("1.2.3.4.5"), "custom")), "1.2.3.4.5=#0c06637573746f6d"),
    ],
)
def test_distinguished_name_keywords_and_order(
    ca: CertificateAuthority, subject: x509.Name, expected: str
) -> None:
    assert dn_of(ca, subject) == expected  # Java


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # Java escapes , + " \ < > ; and also = and # anywhere
        ('a,b+c=d<e>f;g"h\\i#j', 'CN=a\\,b\\+c\\=d\\<e\\>f\\;g\\"h\\\\i\\#j'),
        ("#lead", "CN=\\#lead"),
        # each leading and trailing space (and CR) gets its own backslash
        (" lead and trail  ", "CN=\\ lead and trail\\ \\ "),
        ("  ", "CN=\\ \\ "),
        ("x\ry\r", "CN=x\ry\\\r"),
        ("\rx", "CN=\\\rx"),
        ("nul\x00x", "CN=nul\\00x"),
        # everything else verbatim: inner spaces, tabs, newlines, non-ASCII
        ("a  b", "CN=a  b"),
        ("tab\there", "CN=tab\there"),
        ("new\nline", "CN=new\nline"),
        ("é ü 日本 😀", "CN=é ü 日本 😀"),
        ("end\\", "CN=end\\\\"),
    ],
)
def test_distinguished_name_escaping(ca: CertificateAuthority, value: str, expected: str) -> None:
    assert dn_of(ca, single(A(NameOID.COMMON_NAME, value))) == expected  # Java


def test_distinguished_name_multi_valued_rdns(ca: CertificateAuthority) -> None:
    # AVAs of one RDN joined with '+' in their encoded (DER SET) order, not sorted by Java
    subject = x509.Name(
        [
            RDN([A(NameOID.COUNTRY_NAME, "US")]),
            RDN([A(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"), A(NameOID.COMMON_NAME, "alice")]),
        ]
    )
    assert dn_of(ca, subject) == "OU=eng+CN=alice,C=US"  # Java
    three = x509.Name(
        [
            RDN(
                [
                    A(NameOID.COMMON_NAME, "zed"),
                    A(NameOID.USER_ID, "a1"),
                    A(NameOID.ORGANIZATION_NAME, "o"),
                ]
            )
        ]
    )
    assert dn_of(ca, three) == "O=o+CN=zed+UID=a1"  # Java


@pytest.mark.parametrize(
    ("asn1_type", "value", "expected"),
    [
        (_ASN1Type.PrintableString, "pr", "CN=pr"),
        (_ASN1Type.T61String, "t61", "CN=t61"),
        (_ASN1Type.IA5String, "ia5", "CN=ia5"),
        # Java decodes every string type's bytes as UTF-8: a BMPString's zero bytes show
        (_ASN1Type.BMPString, "bmp", "CN=\\00b\\00m\\00p"),
        # string types Java does not print as strings
        (_ASN1Type.VisibleString, "vis", "CN=#1a03766973"),
        (_ASN1Type.NumericString, "123", "CN=#1203313233"),
        (
            _ASN1Type.UniversalString,
            "univ",
            "CN=#1c10000000750000006e0000006900000076",
        ),
    ],
)
def test_distinguished_name_string_types(
    ca: CertificateAuthority, asn1_type: _ASN1Type, value: str, expected: str
) -> None:
    assert dn_of(ca, single(A(NameOID.COMMON_NAME, value, asn1_type))) == expected  # Java


def test_distinguished_name_invalid_utf8_is_replaced(ca: CertificateAuthority) -> None:
    der = ca.issue(
        subject=single(A(NameOID.COMMON_NAME, "caf\u00e9", _ASN1Type.T61String)),
        dns_names=(),
        ip_addresses=(),
    ).der
    at = der.find(b"caf")
    latin1 = der[: at + 3] + b"\xe9A" + der[at + 5 :]  # same length: a Latin-1 é, then "A"
    assert distinguished_name(latin1) == "CN=caf\ufffdA"  # Java


def test_distinguished_name_rejects_non_certificates() -> None:
    with pytest.raises(ValueError):
        distinguished_name(b"not a certificate")
    with pytest.raises(ValueError):
        distinguished_name(b"\x30\x03\x02\x01\x00")


# ---------------------------------------------------------------------------------------------
# ssl.principal.mapping.rules (Kafka's SslPrincipalMapperTest, then Java's finer points)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_valid_rules(rules: str) -> None:
    SslPrincipalMapper.from_rules(rules)


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ("default", "Invalid rule: `default`, unmatched substring: `default`"),
        ("DEFAUL", "unmatched substring: `DEFAUL`"),
        ("DEFAULT/L", "Invalid rule: `DEFAULT/L`, unmatched substring: `/L`"),
        ("DEFAULT/U", "unmatched substring: `/U`"),
        ("RULE:CN=(.*?),OU=ServiceUsers.*/$1", "Invalid rule: `RULE:CN=(.*?)`"),
        ("rule:^CN=(.*?),OU=ServiceUsers.*$/$1/", "Invalid rule"),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U", "Invalid rule"),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/L", "Invalid rule"),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/U", "Invalid rule"),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/LU", "Invalid rule"),
        ("RULE:^CN=(.*$/$1/", "invalid regular expression"),  # Java: PatternSyntaxException
    ],
)
def test_invalid_rules(rules: str, message: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule") as e:
        SslPrincipalMapper.from_rules(rules)
    assert message in str(e.value)


def test_mapper() -> None:
    mapper = SslPrincipalMapper.from_rules(
        ", ".join(
            [
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
                "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
                "DEFAULT",
            ]
        )
    )
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert (
        mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    )


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ("", "[]"),
        ("DEFAULT", "[DEFAULT]"),
        ("RULE://", "[RULE:/]"),
        ("RULE:/.*/", "[RULE:/.*]"),
        ("RULE:/.*/L", "[RULE:/.*/L]"),
        ("RULE://,DEFAULT", "[RULE:/, DEFAULT]"),
        ("  RULE:// ,  DEFAULT  ", "[RULE:/, DEFAULT]"),
        ("  RULE:   /     / ,  DEFAULT  ", "[RULE:   /     , DEFAULT]"),
        ("  RULE:  /     /U   ,DEFAULT  ", "[RULE:  /     /U, DEFAULT]"),
        (
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
            "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
        ),
        # empty rules are ignored
        (",   , , ,      , , ,   ", "[]"),
        (",,RULE://,,,DEFAULT,,", "[RULE:/, DEFAULT]"),
        (",  , RULE: /   /    ,,,   DEFAULT, ,   ", "[RULE: /   , DEFAULT]"),
        ("     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,", "[RULE:   /  /U, DEFAULT]"),
        # escape sequences
        ("RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//", "[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]"),
        ("RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/", "[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]"),
        # rules rule
        (
            "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, "
            "/DEFAULT/,DEFAULT",
            "[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, "
            "RULE:, DEFAULT, /DEFAULT, DEFAULT]",
        ),
    ],
)
def test_rules_splitting(rules: str, expected: str) -> None:
    assert str(SslPrincipalMapper.from_rules(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_comma_with_whitespace() -> None:
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_default_rules() -> None:
    for mapper in (SslPrincipalMapper.from_rules(None), SslPrincipalMapper.from_rules("DEFAULT")):
        assert mapper.name("CN=alice,O=Odradek") == "CN=alice,O=Odradek"


def test_no_matching_rule() -> None:
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=(.*)$/$1/, RULE:x/y/")
    with pytest.raises(NoMatchingRule, match=r"No rules apply to O=z, rules \[RULE:\^CN="):
        mapper.name("O=z")
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper.from_rules("").name("CN=a")


@pytest.mark.parametrize(
    ("rules", "dn", "expected"),
    [
        # the pattern must match the whole DN (Matcher.matches)...
        ("RULE:b/c/, DEFAULT", "abc", "abc"),
        # ...then String.replaceAll applies it from the start, Java's way with empty matches
        ("RULE:(.*?)/[$1]/", "ab", "[]a[]b[]"),
        ("RULE:a??/-/", "a", "-a-"),
        ("RULE:.*/-/", "abc", "--"),
        ("RULE:(b)?/[$1]/", "b", "[b][]"),
        # $n naming no group is literal when the pattern has groups ($12 -> group 1, "2")
        ("RULE:^CN=(.*)$/$1$2/", "CN=x", "x$2"),
        ("RULE:^CN=(.*)$/$12/", "CN=x", "x2"),
        ("RULE:^CN=(.*)$/$0/", "CN=x", "CN=x"),
        ("RULE:^CN=(.*)$/$01/", "CN=x", "x"),
        ("RULE:^CN=(.*)$/\\$1/", "CN=x", "$1"),
        ("RULE:^CN=(?<name>.*)$/${name}/", "CN=x", "x"),
        ("RULE:^.*$/\\\\/", "x", "\\"),
        ("RULE:^CN=(.*?),O=.*$/$1\\/x/", "CN=a,O=b", "a/x"),
        # L and U
        ("RULE:^CN=(.+)$/$1/L", "CN=ÀÉ", "àé"),
        ("RULE:^CN=é(.*)$/$1/U", "CN=éa", "A"),
    ],
)
def test_java_replacement_semantics(rules: str, dn: str, expected: str) -> None:
    assert SslPrincipalMapper.from_rules(rules).name(dn) == expected  # Java


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        # Kafka fails these at the first matching connection; we refuse them up front
        ("RULE:^CN=.*$/$1/", "No group 1"),
        ("RULE:^CN=(.*),(.*)$/$4$5/", "No group 5"),  # Kafka's NiFi-derived escaping quirk
        ("RULE:^CN=(?<name>.*)$/${nope}/", "No group with name {nope}"),
        ("RULE:^CN=(.*)$/$/", "group index is missing"),
        ("RULE:^CN=(.*)$/a$b/", "Illegal group reference"),
    ],
)
def test_bad_replacements_are_refused(rules: str, message: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule") as e:
        SslPrincipalMapper.from_rules(rules)
    assert message in str(e.value)


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        # Java's defaults: \w \d \s and (?i) are ASCII
        ("^CN=(\\w+)$", "CN=é", False),
        ("^CN=\\d+$", "CN=١٢", False),
        ("^CN=\\s$", "CN=\u00a0", False),
        ("^CN=(?i)é$", "CN=É", False),
        ("(?i)^cn=x$", "CN=X", True),
        # a mid-pattern flag runs to the end of its group, across alternatives
        ("^CN=(?i)abc|def$", "CN=ABC", True),
        ("^CN=(?i)abc|def$", "DEF", True),
        ("^CN=(?i)abc|def$", "def", True),
        ("a(?i)b|c", "C", True),
        ("(a(?i)b)c", "aBc", True),
        ("(a(?i)b)c", "aBC", False),
        # quoting, \z \Z, POSIX classes, class unions, \x{..}, octal, \e, \h
        ("^CN=\\Qa.b\\E(.*)$", "CN=a.bz", True),
        ("^CN=\\Qa.b\\E(.*)$", "CN=axbz", False),
        ("^CN=\\p{Alpha}+\\z", "CN=abc", True),
        ("^CN=[\\p{Digit}x]+$", "CN=12x", True),
        ("^CN=[a[bc]]+$", "CN=abca", True),
        ("^(.*)\\Z", "x", True),
        ("^CN=\\x{41}(.)$", "CN=AB", True),
        ("^CN=\\0101(.)$", "CN=AB", True),
        ("^CN=\\e?(.)$", "CN=B", True),
        ("^CN=\\h(.)$", "CN= B", True),
        # back references: more digits only while they name a group
        ("^CN=(a)\\11$", "CN=aa1", True),
        ("^CN=(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)\\11$", "CN=abcdefghijkk", True),
        ("^CN=(?<n>a)\\k<n>$", "CN=aa", True),
        # possessive quantifiers and atomic groups (Python 3.11 has them)
        ("^CN=(\\w++)$", "CN=abc", True),
        ("^CN=(?>a|ab)c$", "CN=abc", False),
    ],
)
def test_java_regex(pattern: str, text: str, matches: bool) -> None:
    assert (java_regex(pattern).fullmatch(text) is not None) is matches  # Java


@pytest.mark.parametrize(
    "pattern", ["[a-z&&[^b]]", "\\p{IsLatin}", "\\G", "(?u)x", "(?x)a b", "[a[^b]]"]
)
def test_java_regex_constructs_without_equivalent(pattern: str) -> None:
    with pytest.raises(ValueError, match="unsupported Java regex construct"):
        java_regex(pattern)


# ---------------------------------------------------------------------------------------------
# ssl_principal_name
# ---------------------------------------------------------------------------------------------


def test_ssl_principal_name(ca: CertificateAuthority) -> None:
    der = ca.issue(
        subject=name(CN="Alice", OU="ServiceUsers", O="Odradek", C="US"),
        dns_names=(),
        ip_addresses=(),
    ).der
    assert ssl_principal_name(der, SslPrincipalMapper.from_rules(None)) == (
        "CN=Alice,OU=ServiceUsers,O=Odradek,C=US"
    )
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT")
    assert ssl_principal_name(der, mapper) == "alice"
    # no client certificate: Kafka's KafkaPrincipal.ANONYMOUS
    assert ssl_principal_name(None, mapper) == "ANONYMOUS"
