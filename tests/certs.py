"""A self-signed certificate for 127.0.0.1 (and localhost), made with openssl.

Shared by the TLS tests and benchmarks/remote.py --tls: trust it through
WH_CA_BUNDLE=<cert>.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["self_signed"]


def self_signed(where: Path, days: int = 2) -> tuple[Path, Path]:
    """A new certificate and its private key (PEM) in ``where``: (cert, key)."""
    where.mkdir(parents=True, exist_ok=True)
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt"),
            *("ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out", str(cert)),
            *("-days", str(days), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key
