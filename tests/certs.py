"""Test certificates (made with the `cryptography` package): a CA, a server certificate for
localhost / 127.0.0.1 / ::1, and client certificates, as PEM files.

    python tests/certs.py DIR [CLIENT_CN ...]     # writes ca.pem, server.pem, server.key, <cn>.pem, <cn>.key

The TypeScript and Go client tests call it that way; tests/test_auth.py imports it.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(cn: str, org: str = "Agent State Tests") -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn), x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)])


def _cert(subject, issuer, key, signer, *, ca: bool, usage=None, san=None) -> x509.Certificate:
    now = dt.datetime.now(dt.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
         .not_valid_after(now + dt.timedelta(days=2))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                          content_commitment=False, key_encipherment=False, data_encipherment=False,
                                          key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
    if usage:
        b = b.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    if san:
        b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return b.sign(signer, hashes.SHA256())


class PKI:
    """Files of one throwaway PKI in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._ca_key = _key()
        self._ca_name = _name("Agent State Test CA")
        self._ca = _cert(self._ca_name, self._ca_name, self._ca_key, self._ca_key, ca=True)
        self.ca = self._write("ca.pem", self._ca.public_bytes(serialization.Encoding.PEM))
        key = _key()
        cert = _cert(_name("localhost"), self._ca_name, key, self._ca_key, ca=False,
                     usage=[ExtendedKeyUsageOID.SERVER_AUTH],
                     san=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                          x509.IPAddress(ipaddress.ip_address("::1"))])
        self.server_cert = self._write("server.pem", cert.public_bytes(serialization.Encoding.PEM))
        self.server_key = self._write("server.key", _pem_key(key))

    def _write(self, name: str, data: bytes) -> Path:
        path = self.dir / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    def client(self, cn: str) -> tuple[Path, Path]:
        """A client certificate with subject CN=cn, O=Agent State Tests: (cert path, key path)."""
        key = _key()
        cert = _cert(_name(cn), self._ca_name, key, self._ca_key, ca=False,
                     usage=[ExtendedKeyUsageOID.CLIENT_AUTH])
        return (self._write(f"{cn}.pem", cert.public_bytes(serialization.Encoding.PEM)),
                self._write(f"{cn}.key", _pem_key(key)))


if __name__ == "__main__":
    pki = PKI(Path(sys.argv[1]))
    for cn in sys.argv[2:]:
        pki.client(cn)
