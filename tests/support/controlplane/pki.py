"""The control plane's certificates and keys, made fresh for each cluster: one CA, the API server's
serving certificate, a client certificate per identity, and the service-account signing key."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALIDITY = datetime.timedelta(days=7)  # a test cluster's life, with room for a long debugging session


@dataclass(frozen=True)
class Pair:
    certificate: Path
    key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


class Authority:
    """A CA kept in `directory` (ca.crt, ca.key) that signs the cluster's certificates."""

    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.key = _key()
        now = datetime.datetime.now(datetime.UTC)
        self.name = _name("triton-operator-test-ca")
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.pair = Pair(directory / "ca.crt", directory / "ca.key")
        self.pair.certificate.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))
        _write_key(self.key, self.pair.key)

    def issue(
        self, file_name: str, common_name: str, organization: str | None = None, addresses: tuple[str, ...] = ()
    ) -> Pair:
        """A certificate for a client identity (CN user, O group) or, with `addresses`, a server."""
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        usage = [x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]
        if addresses:
            usage.append(x509.oid.ExtendedKeyUsageOID.SERVER_AUTH)
            names: list[x509.GeneralName] = []
            for address in addresses:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(address)))
                except ValueError:
                    names.append(x509.DNSName(address))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False).sign(
            self.key, hashes.SHA256()
        )
        pair = Pair(self.directory / f"{file_name}.crt", self.directory / f"{file_name}.key")
        pair.certificate.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair


def service_account_keys(directory: Path) -> Pair:
    """The key the API server signs service-account tokens with (`key`) and checks them by (`certificate`:
    here the public key, which is what --service-account-key-file takes)."""
    key = _key()
    pair = Pair(directory / "sa.pub", directory / "sa.key")
    _write_key(key, pair.key)
    pair.certificate.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pair
