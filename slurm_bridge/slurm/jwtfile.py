"""The Slurm JWT, read from a file (a Kubernetes Secret's key) and re-read when the file changes,
so a rotated token needs no restart."""

from __future__ import annotations

import base64
import binascii
import json
import logging
from pathlib import Path

from .errors import SlurmAuthError

# The client logs under one name, whichever of its modules writes the line.
log = logging.getLogger("slurm_bridge.slurm.client")


# Keys the Go slurm-bridge's JWT Secret uses: a missing token file is also looked for under these
# names in its directory, so a Secret made for the Go bridge works unchanged (docs/migrating.md).
GO_SECRET_KEYS = ("SLURM_JWT", "auth-token")


def token_user(token: str) -> str:
    """The Slurm user a JWT names (its ``sun`` claim; not verified: only for reading)."""
    try:
        payload = token.split(".")[1]
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, binascii.Error):
        return ""
    return str(data.get("sun") or "") if isinstance(data, dict) else ""


class JwtFile:
    """The JWT file, re-read only when its mtime, size or inode changes.

    A Kubernetes Secret volume swaps a symlink on update, which changes the inode; a plain
    rewrite changes mtime/size. The token itself never leaves this object except into a header.
    """

    def __init__(self, path: Path, source: str = "") -> None:
        self.configured = path
        self.path = path
        # Where the file comes from (e.g. "Secret ns/name, key jwt"), so errors say what to fix.
        self._where = f" (it comes from {source})" if source else ""
        self._key: tuple[int, int, int] | None = None
        self._token = ""

    def __repr__(self) -> str:
        return f"JwtFile({str(self.path)!r})"

    def _find(self) -> Path:
        """The configured file, or else a Go bridge Secret key's file beside it."""
        if self.configured.exists():
            return self.configured
        for key in GO_SECRET_KEYS:
            alias = self.configured.parent / key
            if alias.exists():
                if alias != self.path:
                    log.info("Slurm JWT: %s is missing; using %s (the Go slurm-bridge's key)", self.configured, alias)
                return alias
        return self.configured

    def get(self) -> str:
        self.path = self._find()
        try:
            st = self.path.stat()
        except OSError as e:
            also = f" (nor {', '.join(GO_SECRET_KEYS)} beside it)"
            raise SlurmAuthError(
                f"cannot read the Slurm JWT file {self.path}{also}{self._where}: {e.strerror}"
            ) from None
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key != self._key or not self._token:
            try:
                text = self.path.read_text(encoding="utf-8", errors="replace")
            except OSError as e:
                raise SlurmAuthError(f"cannot read the Slurm JWT file {self.path}{self._where}: {e.strerror}") from None
            token = _parse_token(text)
            if not token:
                raise SlurmAuthError(f"the Slurm JWT file {self.path}{self._where} is empty")
            self._key, self._token = key, token
        return self._token

    def invalidate(self) -> None:
        self._key = None


def _parse_token(text: str) -> str:
    """A bare token, or the ``SLURM_JWT=<token>`` line that ``scontrol token`` prints."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    for ln in lines:
        ln = ln.removeprefix("export ").strip()
        if ln.startswith("SLURM_JWT="):
            return ln.removeprefix("SLURM_JWT=").strip().strip("'\"")
    return lines[0].strip("'\"") if lines else ""
