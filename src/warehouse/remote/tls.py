"""How clients check servers' certificates: the system's CAs, or ``WH_CA_BUNDLE``.

Every client of ours (the JSON API and block transfers over http.client,
keep servers asking the controller over httpx) verifies the certificate
of an ``https://`` server and its host name. ``WH_CA_BUNDLE`` names a PEM
file of CA certificates to trust instead of the system's, e.g. an
installation's own CA or a self-signed server certificate.
"""

from __future__ import annotations

import os
import ssl

from warehouse.errors import UsageError

__all__ = ["CA_BUNDLE_ENV", "ca_bundle", "client_context", "tls_failure", "verify_for"]

CA_BUNDLE_ENV = "WH_CA_BUNDLE"


def ca_bundle() -> str | None:
    """The CA bundle file from the environment, or None for the system's CAs."""
    return os.environ.get(CA_BUNDLE_ENV) or None


def client_context() -> ssl.SSLContext:
    """A context that verifies certificates and host names against the CA bundle."""
    bundle = ca_bundle()
    try:
        return ssl.create_default_context(cafile=bundle)
    except (OSError, ssl.SSLError) as e:
        raise UsageError(f"cannot load the CA bundle {bundle} ({CA_BUNDLE_ENV}): {e}") from None


def verify_for(*urls: str) -> ssl.SSLContext | bool:
    """httpx's ``verify`` for a client of ``urls``: a verifying context when
    any is ``https://``; for plain HTTP none is needed, and loading the CAs
    costs a tenth of a second at every start."""
    if any(u.lower().startswith("https:") for u in urls):
        return client_context()
    return False


def tls_failure(error: BaseException) -> ssl.SSLError | None:
    """The TLS error behind a failed connection, if one is (an untrusted
    certificate, a failed handshake): a server answered, so waiting for it
    to start cannot help."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
