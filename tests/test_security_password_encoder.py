"""Kafka's PasswordEncoder: dynamic password configs encrypted with password.encoder.secret.
The fixed values were made by Java's own PBKDF2WithHmacSHA512 and AES ciphers, exactly as
Kafka's EncryptingPasswordEncoder makes them (JDK javax.crypto, `java PE.java`), so a broker
of either kind reads what the other stored."""

from __future__ import annotations

import pytest

from odradek.security.password_encoder import PasswordEncoder, PasswordEncoderError

SECRET = "sécret-ü"
PASSWORD = "keystore-pässword-🔑"
JAVA_CBC = (
    "keyFactoryAlgorithm:PBKDF2WithHmacSHA512,cipherAlgorithm:AES/CBC/PKCS5Padding,keyLengt"
    "h:128,salt:yNoZrIEehooNPmUePRj4Vn48bv7aPWdNg51CMoTYxvEMDDxtPnbT7M5sjYG0VCAgsadJrzKhc9l"
    "ExzznyKUrod+/XWu2iyEcXRTn6ju/9oVjEd4RsWOGI6Cvq7tEERBUrx0E6lULbMMkIsN6ZBnlaC+IP2Dsa89c4"
    "20+YJBdnmbx35vLfuiAqTles7rdFdoqf+y1Mobu8G0KDz4dXe0yIfVOUWYME4+cCD2PQO/Abz75L7yGd/u3O/R"
    "EXcnH+kE+K+X5jQjXvQUD4GzL/04+la2g9nw7yYNerPdBRTIy7HZHdcZd1W1yiLsYxouMQmx6nFWZ4bARlSfcb"
    "TGKo4PnNw==,iterations:4096,encryptedPassword:em5LefChOZN/6IqPPFoaqltqvBvrQTngIemHuEQm"
    "7sc=,passwordLength:20,initializationVector:WKohEvOp6DUf7YiZn7i/+g=="
)
JAVA_GCM = (
    "keyFactoryAlgorithm:PBKDF2WithHmacSHA512,cipherAlgorithm:AES/GCM/NoPadding,keyLength:1"
    "28,salt:5KHv6iMTyYRugTEc5oiebtxz11AGK7p0Gm8UnEw6+gQzSaikJlzbZvA3TuOS6ZkEp+C9NfrTUt19xh"
    "51QExA8uArAnPpb+u7o6Kk5BlX17Z1f6Kr0sa0MaXpJ/xnwq49LBraiu96d/5e/fPAMuYFrn9R/Iz4Ey9ZOmiG"
    "aqIgnBnq3xvzwDO8SsRV08jiAI+aelwXvitHt6EUf4yW5RgBuifp1vJOZBj070xkx78kbti3lrIC6Sx6mJHP2v"
    "5JsPTTdOyafzcZG0Fe3lNDUzQ9NOEzTc9HeBshZNlurnQ/NWoqax4ysvYNig9rG35h7cSnokVv1RJE+iPy9KAJ"
    "O364sw==,iterations:4096,encryptedPassword:knYcPw5A63QoDOJNjBpPGABOJm7YafDILOneD4Jdru3"
    "ZByrYKGnR,passwordLength:20,initializationVector:T7GNm1Q0E5LKLl7m,authenticationTagLen"
    "gth:128"
)


@pytest.mark.parametrize("encoded", [JAVA_CBC, JAVA_GCM], ids=["cbc", "gcm"])
def test_what_java_encoded_is_decoded(encoded: str) -> None:
    assert PasswordEncoder(SECRET).decode(encoded) == PASSWORD
    with pytest.raises(PasswordEncoderError, match="Password could not be decoded"):
        PasswordEncoder("another secret").decode(encoded)


@pytest.mark.parametrize("cipher", ["AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"])
@pytest.mark.parametrize("key_factory", ["PBKDF2WithHmacSHA512", "PBKDF2WithHmacSHA1"])
def test_round_trip_in_kafkas_format(cipher: str, key_factory: str) -> None:
    encoder = PasswordEncoder(SECRET, key_factory, cipher, key_length=256, iterations=1024)
    encoded = encoder.encode(PASSWORD)
    fields = dict(item.split(":", 1) for item in encoded.split(","))
    assert fields["cipherAlgorithm"] == cipher and fields["keyFactoryAlgorithm"] == key_factory
    assert fields["keyLength"] == "256" and fields["iterations"] == "1024"
    assert fields["passwordLength"] == str(len(PASSWORD) + 1)  # Java counts UTF-16 units
    assert PASSWORD.encode() not in encoded.encode()
    assert encoder.encode(PASSWORD) != encoded  # a fresh salt and IV each time
    # Decoding follows the stored parameters, whatever the decoder's own.
    assert PasswordEncoder(SECRET).decode(encoded) == PASSWORD


def test_damaged_values_and_unsupported_settings() -> None:
    encoder = PasswordEncoder(SECRET)
    encoded = encoder.encode("pw")
    for damaged in (encoded.replace("passwordLength:2", "passwordLength:3"), "garbage",
                    encoded.replace("encryptedPassword:", "encryptedPassword:AA")):
        with pytest.raises(PasswordEncoderError, match="Password could not be decoded"):
            encoder.decode(damaged)
    with pytest.raises(PasswordEncoderError, match=r"cipher\.algorithm=DES"):
        PasswordEncoder(SECRET, cipher_algorithm="DES/CBC/PKCS5Padding")
    with pytest.raises(PasswordEncoderError, match=r"keyfactory\.algorithm=PBKDF2WithHmacMD5"):
        PasswordEncoder(SECRET, "PBKDF2WithHmacMD5")
    with pytest.raises(PasswordEncoderError, match=r"key\.length=100"):
        PasswordEncoder(SECRET, key_length=100)
