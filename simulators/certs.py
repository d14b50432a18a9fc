"""Self-signed certificates for the simulated OPC UA rigs, generated into a directory.

Layout of ``ensure_pki(dir)``::

    server_cert.der, server_key.pem     the drive (server) identity
    client_cert.der, client_key.pem     a client identity that the server trusts
    trusted/client_cert.der             the server's trust store (copy of the trusted client cert)
    trusted_servers/server_cert.der     a client's trust store for the server (``server_trust_dir``)

Every certificate carries its application URI in subjectAltName (and the host name as DNS name); the
OPC UA application using it must announce that same URI as its ApplicationUri (the server does so in
simulators/crane_drive.py, the driver takes it from its certificate), or peers refuse the connection.
``make_identity(dir, name)`` creates further identities (e.g. an untrusted client for tests).
"""

from __future__ import annotations

import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

from asyncua.crypto.cert_gen import setup_self_signed_certificate
from cryptography.x509.oid import ExtendedKeyUsageOID

SERVER_URI = "urn:hil-lab:crane-drive:server"
CLIENT_URI = "urn:hil-lab:client"


@dataclass(frozen=True)
class Identity:
    cert: Path  # DER
    key: Path  # PEM
    app_uri: str


@dataclass(frozen=True)
class Pki:
    server: Identity
    client: Identity
    trusted_dir: Path  # client certificates the server trusts
    server_trusted_dir: Path  # server certificates a client trusts


async def make_identity(directory: str | Path, name: str, app_uri: str, server: bool = False) -> Identity:
    """Create (or reuse, if still valid) a key + self-signed certificate ``<name>_cert.der``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = directory / f"{name}_key.pem"
    cert = directory / f"{name}_cert.der"
    use = [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
    await setup_self_signed_certificate(
        key, cert, app_uri, socket.gethostname(), use,
        {"commonName": f"hil-lab {name}", "organizationName": "hil-lab", "countryName": "DE"},
    )
    return Identity(cert=cert, key=key, app_uri=app_uri)


async def ensure_pki(directory: str | Path) -> Pki:
    """Server identity, one trusted client identity and the trust store in ``directory``."""
    directory = Path(directory)
    server = await make_identity(directory, "server", SERVER_URI, server=True)
    client = await make_identity(directory, "client", CLIENT_URI)
    trusted = directory / "trusted"
    trusted.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(client.cert, trusted / client.cert.name)
    servers = directory / "trusted_servers"
    servers.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(server.cert, servers / server.cert.name)
    return Pki(server=server, client=client, trusted_dir=trusted, server_trusted_dir=servers)
