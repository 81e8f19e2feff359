"""kopf's login from the bridge's own credential loader (slurm_bridge.kube.kubeconfig).

kopf's built-in logins either need the ``kubernetes``/``pykube-ng`` packages or, in its minimal
ones, know neither exec plugins nor the in-cluster Service address (its service-account login
calls https://kubernetes.default.svc, which needs cluster DNS). kopf calls this again whenever
the API answers 401 and, for an exec plugin's token, before the expiry the plugin reported; each
call reads the token file again or runs the plugin again. The credentials are the operator's
own client's (loaded once, in operator/wiring/app.py), so a token kopf renews serves that client too.
"""

from __future__ import annotations

import kopf

from slurm_bridge.kube import kubeconfig


async def login(creds: kubeconfig.Credentials) -> kopf.ConnectionInfo:
    token = None
    if creds.auth is not None:
        creds.auth.invalidate()  # kopf asks only when the last credentials failed or expired
        token = await creds.auth.token() or None
    cert = creds.cert_data
    key = creds.key_data
    if isinstance(creds.auth, kubeconfig.ExecToken) and creds.auth.certificate:
        cert, key = (part.encode() for part in creds.auth.certificate)
    return kopf.ConnectionInfo(
        server=creds.server,
        ca_path=creds.ca_path,
        ca_data=creds.ca_data,
        insecure=creds.insecure or None,
        certificate_path=creds.cert_path,
        certificate_data=cert,
        private_key_path=creds.key_path,
        private_key_data=key,
        scheme="Bearer" if token else None,
        token=token,
        default_namespace=creds.namespace,
        expiration=creds.auth.expiration if creds.auth is not None else None,
    )
