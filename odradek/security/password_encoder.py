"""Dynamic password configs, encrypted as Kafka stores them in ZooKeeper (PasswordEncoder).

A broker's dynamic password settings (`listener.name.ssl.ssl.keystore.password`, ...) are
kept in /config/brokers/<id> encrypted with the broker's static `password.encoder.secret`:
PBKDF2 over the secret (password.encoder.keyfactory.algorithm, PBKDF2WithHmacSHA512 by
default; .key.length bits; .iterations; a random 256-byte salt) keys
password.encoder.cipher.algorithm (AES/CBC/PKCS5Padding by default, or AES/GCM/NoPadding),
and the store holds Kafka's CSV map of the parameters and the ciphertext, so a Kafka broker
and an Odradek broker with the same secret read each other's. With
`password.encoder.old.secret` set, values the old secret decodes are encoded again with the
new one at start-up (Kafka's secret rotation).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from typing import Any

from odradek.lazy_modules import lazy_module

# Loaded when a password is first encoded or decoded, not with every broker.
hashes = lazy_module("cryptography.hazmat.primitives.hashes")
padding = lazy_module("cryptography.hazmat.primitives.padding")
ciphers = lazy_module("cryptography.hazmat.primitives.ciphers")
aead = lazy_module("cryptography.hazmat.primitives.ciphers.aead")
pbkdf2 = lazy_module("cryptography.hazmat.primitives.kdf.pbkdf2")

DEFAULT_KEY_FACTORY = "PBKDF2WithHmacSHA512"
DEFAULT_CIPHER = "AES/CBC/PKCS5Padding"
_KEY_FACTORIES: dict[str, Callable[[], hashes.HashAlgorithm]] = {
    "PBKDF2WithHmacSHA512": lambda: hashes.SHA512(),
    "PBKDF2WithHmacSHA256": lambda: hashes.SHA256(),
    "PBKDF2WithHmacSHA1": lambda: hashes.SHA1(),
}
_CIPHERS = ("AES/CBC/PKCS5Padding", "AES/GCM/NoPadding")
_SALT_BYTES = 256  # Kafka's
_GCM_IV_BYTES = 12  # what Java's AES/GCM cipher generates
_GCM_TAG_BITS = 128


class PasswordEncoderError(ValueError):
    """A password that cannot be encoded or decoded with these settings."""


class PasswordEncoder:
    """Kafka's EncryptingPasswordEncoder: `encode` gives the CSV map a store keeps,
    `decode` reads one (with the parameters it names, whatever this encoder's are)."""

    def __init__(self, secret: str, key_factory_algorithm: str | None = None,
                 cipher_algorithm: str = DEFAULT_CIPHER, key_length: int = 128,
                 iterations: int = 4096) -> None:
        self._secret = secret.encode()  # Java's PBKDF2 takes the secret's chars as UTF-8
        self.key_factory_algorithm = key_factory_algorithm or DEFAULT_KEY_FACTORY
        self.cipher_algorithm = cipher_algorithm
        self.key_length = key_length
        self.iterations = iterations
        _check(self.key_factory_algorithm, cipher_algorithm, key_length)

    def encode(self, password: str) -> str:
        salt = os.urandom(_SALT_BYTES)
        key = self._key(self.key_factory_algorithm, self.key_length, salt, self.iterations)
        plain = password.encode()
        fields = {
            "keyFactoryAlgorithm": self.key_factory_algorithm,
            "cipherAlgorithm": self.cipher_algorithm,
            "keyLength": str(self.key_length),
            "salt": _b64(salt),
            "iterations": str(self.iterations),
            "passwordLength": str(_java_length(password)),
        }
        if self.cipher_algorithm.startswith("AES/GCM/"):
            iv = os.urandom(_GCM_IV_BYTES)
            encrypted = aead.AESGCM(key).encrypt(iv, plain, None)
            fields["authenticationTagLength"] = str(_GCM_TAG_BITS)
        else:
            iv = os.urandom(16)
            padder = padding.PKCS7(128).padder()
            encryptor = _aes_cbc(key, iv).encryptor()
            encrypted = encryptor.update(padder.update(plain) + padder.finalize()) + \
                encryptor.finalize()
        fields["initializationVector"] = _b64(iv)
        fields["encryptedPassword"] = _b64(encrypted)
        return ",".join(f"{k}:{v}" for k, v in fields.items())

    def decode(self, encoded: str) -> str:
        try:
            fields = dict(item.split(":", 1) for item in encoded.split(","))
            key_factory = fields["keyFactoryAlgorithm"]
            cipher = fields["cipherAlgorithm"]
            key_length = int(fields["keyLength"])
            _check(key_factory, cipher, key_length)
            key = self._key(key_factory, key_length, base64.b64decode(fields["salt"]),
                            int(fields["iterations"]))
            iv = base64.b64decode(fields["initializationVector"])
            encrypted = base64.b64decode(fields["encryptedPassword"])
            if cipher.startswith("AES/GCM/"):
                if int(fields["authenticationTagLength"]) != _GCM_TAG_BITS:
                    raise PasswordEncoderError("only 128-bit GCM tags are supported")
                plain = aead.AESGCM(key).decrypt(iv, encrypted, None)
            else:
                decryptor = _aes_cbc(key, iv).decryptor()
                unpadder = padding.PKCS7(128).unpadder()
                padded = decryptor.update(encrypted) + decryptor.finalize()
                plain = unpadder.update(padded) + unpadder.finalize()
            password = plain.decode()
            length = int(fields["passwordLength"])
        except PasswordEncoderError:
            raise
        except Exception as e:  # a wrong secret, a damaged value: Kafka's message
            raise PasswordEncoderError("Password could not be decoded") from e
        if _java_length(password) != length:
            raise PasswordEncoderError(
                "Password could not be decoded, sanity check of length failed")
        return password

    def _key(self, key_factory: str, key_length: int, salt: bytes, iterations: int) -> bytes:
        kdf = pbkdf2.PBKDF2HMAC(_KEY_FACTORIES[key_factory](), key_length // 8, salt, iterations)
        return kdf.derive(self._secret)


def _check(key_factory: str, cipher: str, key_length: int) -> None:
    if key_factory not in _KEY_FACTORIES:
        raise PasswordEncoderError(
            f"password.encoder.keyfactory.algorithm={key_factory} is not supported: use one "
            f"of {', '.join(_KEY_FACTORIES)}")
    if cipher not in _CIPHERS:
        raise PasswordEncoderError(
            f"password.encoder.cipher.algorithm={cipher} is not supported: use one of "
            f"{', '.join(_CIPHERS)}")
    if key_length not in (128, 192, 256):
        raise PasswordEncoderError(
            f"password.encoder.key.length={key_length} is not an AES key length (128, 192 "
            "or 256)")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _java_length(text: str) -> int:
    """String.length() in Java: UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def _aes_cbc(key: bytes, iv: bytes) -> Any:
    return ciphers.Cipher(ciphers.algorithms.AES(key), ciphers.modes.CBC(iv))
