"""A private CA and a serving certificate for running the webhook without cert-manager.

An existing CA in the directory is reused, so rotating the serving certificate keeps the
caBundle already registered with the apiserver valid.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from slurm_bridge.core.kubeformats import MAX_NAME_LENGTH, is_dns_label

CA_CERT: Final = "ca.crt"
CA_KEY: Final = "ca.key"
TLS_CERT: Final = "tls.crt"
TLS_KEY: Final = "tls.key"
DEFAULT_HOSTS: Final = ("127.0.0.1", "localhost")


class CertError(Exception):
    """Certificates cannot be made; the message says which input is wrong."""


@dataclass(frozen=True)
class CertFiles:
    ca_cert: Path
    ca_key: Path
    cert: Path
    key: Path
    reused_ca: bool


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """Signing only: a CA signs certificates and CRLs, a serving certificate signs handshakes."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def is_host_name(name: str) -> bool:
    """A DNS name a certificate may carry: labels of at most 63 characters, 253 in all, and an
    optional leading ``*.`` wildcard label."""
    labels = name.removeprefix("*.").split(".")
    return len(name) <= MAX_NAME_LENGTH and all(is_dns_label(label) for label in labels)


def subject_alt_names(hosts: list[str]) -> list[x509.GeneralName]:
    """IP addresses become IP SANs, everything else must be a DNS name."""
    if not hosts:
        raise CertError("at least one --host is needed")
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            continue
        except ValueError:
            pass
        name = host.lower().rstrip(".")
        if not is_host_name(name):
            raise CertError(f"--host {host!r} is neither an IP address nor a DNS name")
        sans.append(x509.DNSName(name))
    return sans


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def make_ca(
    common_name: str = "slurm-bridge webhook CA", days: int = 3650
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def make_serving_cert(
    ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, hosts: list[str], days: int = 365
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    sans = subject_alt_names(hosts)
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0][:64])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _load_ca(cert_path: Path, key_path: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as e:
        raise CertError(f"cannot reuse the CA in {cert_path.parent}: {e} (use --new-ca to replace it)") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        raise CertError(f"{key_path} is not the key of {cert_path} (use --new-ca to replace both)")
    return cert, key


def write_certs(directory: Path, hosts: list[str], *, days: int = 365, new_ca: bool = False) -> CertFiles:
    """Write ca.crt, ca.key, tls.crt and tls.key into ``directory`` (keys mode 600)."""
    if days < 1:
        raise CertError(f"--days must be at least 1, got {days}")
    subject_alt_names(hosts)  # check the hosts before touching any file
    directory.mkdir(parents=True, exist_ok=True)
    files = CertFiles(directory / CA_CERT, directory / CA_KEY, directory / TLS_CERT, directory / TLS_KEY, False)
    reuse = not new_ca and files.ca_cert.exists() and files.ca_key.exists()
    if reuse:
        ca_cert, ca_key = _load_ca(files.ca_cert, files.ca_key)
        if ca_cert.not_valid_after_utc <= _now() + datetime.timedelta(days=1):
            raise CertError(f"the CA in {files.ca_cert} expires soon; use --new-ca")
    else:
        ca_cert, ca_key = make_ca()
        _write(files.ca_key, _key_pem(ca_key), 0o600)
        _write(files.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    cert, key = make_serving_cert(ca_cert, ca_key, hosts, days)
    # Key first: a reloading server only accepts the pair once the certificate matches it.
    _write(files.key, _key_pem(key), 0o600)
    _write(files.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return CertFiles(files.ca_cert, files.ca_key, files.cert, files.key, reuse)
