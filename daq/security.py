"""CurveZMQ keys for bus endpoints that leave the machine.

Endpoints bind to loopback or ipc by default; a publisher binding (or a subscriber connecting to)
a non-loopback tcp address must use CurveZMQ. Keys are Z85 text files in the `zmq.auth` format:
``NAME.key`` (public) and ``NAME.key_secret`` (public + secret, mode 0600), made by
`generate_keys` (the ``walklab keys`` command).

- The publisher (the CURVE *server*) holds its secret file: `CurveServer.from_files`. With
  ``authorized_dir`` it also accepts only the client public keys found in that folder (ZAP
  authentication); without it, any client that knows the server's public key may connect.
- A subscriber (CURVE *client*) needs the server's public key, and its own keypair when the server
  authorizes clients (an ephemeral keypair otherwise): `CurveClient.from_files`.

A subscriber without the right server key never completes the handshake and receives nothing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth


class KeyFileError(ValueError):
    """A key file that is missing, unreadable or not a CurveZMQ key (message names the file)."""


def generate_keys(directory: str | os.PathLike, name: str, *, overwrite: bool = False) -> tuple[Path, Path]:
    """Create a CurveZMQ keypair ``directory/name.key`` and ``directory/name.key_secret``.

    Returns ``(public_path, secret_path)``. The secret file is made readable by its owner only.
    Raises FileExistsError if either file exists and ``overwrite`` is false, ValueError for a name
    that is not a plain file stem.
    """
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"key name {name!r} must be a plain file stem like 'bus' or 'recorder'")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    public, secret = d / f"{name}.key", d / f"{name}.key_secret"
    if not overwrite:
        for p in (public, secret):
            if p.exists():
                raise FileExistsError(f"{p} exists; refusing to overwrite a key (pass overwrite=True / --force)")
    pub_file, sec_file = zmq.auth.create_certificates(str(d), name)
    os.chmod(sec_file, 0o600)
    return Path(pub_file), Path(sec_file)


def load_keypair(path: str | os.PathLike) -> tuple[bytes, bytes | None]:
    """``(public_key, secret_key_or_None)`` (Z85 bytes) from a ``.key`` or ``.key_secret`` file."""
    p = Path(path)
    if not p.is_file():
        raise KeyFileError(f"{p}: key file not found (make one with `walklab keys`)")
    try:
        public, secret = zmq.auth.load_certificate(str(p))
    except (ValueError, OSError, IndexError) as exc:
        raise KeyFileError(f"{p}: not a CurveZMQ key file ({exc})") from None
    if public is None or len(public) != 40 or (secret is not None and len(secret) != 40):
        raise KeyFileError(f"{p}: keys must be 40-character Z85 strings")
    return public, secret


def load_secret(path: str | os.PathLike) -> tuple[bytes, bytes]:
    """``(public_key, secret_key)`` from a ``.key_secret`` file; KeyFileError if it holds no secret."""
    public, secret = load_keypair(path)
    if secret is None:
        raise KeyFileError(f"{path}: holds no secret key (expected the NAME.key_secret file)")
    return public, secret


def load_public_keys(directory: str | os.PathLike) -> tuple[bytes, ...]:
    """Every public key of the ``*.key`` files in ``directory`` (Z85 bytes), sorted by file name."""
    d = Path(directory)
    if not d.is_dir():
        raise KeyFileError(f"{d}: authorized-keys folder not found")
    return tuple(load_keypair(p)[0] for p in sorted(d.glob("*.key")))


@dataclass(frozen=True)
class CurveServer:
    """Keys of a binding (publishing) endpoint. Keys are 40-byte Z85.

    ``authorized_clients``: client public keys allowed to connect; None accepts any client that
    knows ``public_key``.
    """

    public_key: bytes
    secret_key: bytes
    authorized_clients: tuple[bytes, ...] | None = None

    @classmethod
    def from_files(cls, secret_file: str | os.PathLike, authorized_dir: str | os.PathLike | None = None) -> "CurveServer":
        public, secret = load_secret(secret_file)
        clients = None if authorized_dir is None else load_public_keys(authorized_dir)
        return cls(public, secret, clients)

    def apply(self, sock: zmq.Socket) -> None:
        """Make ``sock`` a CURVE server (before bind)."""
        sock.curve_secretkey = self.secret_key
        sock.curve_publickey = self.public_key
        sock.curve_server = True


@dataclass(frozen=True)
class CurveClient:
    """Keys of a connecting (subscribing) endpoint: the server's public key and this client's pair."""

    server_key: bytes
    public_key: bytes
    secret_key: bytes

    @classmethod
    def from_files(cls, server_public_file: str | os.PathLike,
                   client_secret_file: str | os.PathLike | None = None) -> "CurveClient":
        """Client keys; without ``client_secret_file`` an ephemeral keypair is generated."""
        server, _ = load_keypair(server_public_file)
        if client_secret_file is None:
            public, secret = zmq.curve_keypair()
        else:
            public, secret = load_secret(client_secret_file)
        return cls(server, public, secret)

    @classmethod
    def ephemeral(cls, server_key: bytes) -> "CurveClient":
        """A client with a fresh keypair that trusts ``server_key``."""
        public, secret = zmq.curve_keypair()
        return cls(server_key, public, secret)

    def apply(self, sock: zmq.Socket) -> None:
        """Make ``sock`` a CURVE client of ``server_key`` (before connect)."""
        sock.curve_serverkey = self.server_key
        sock.curve_publickey = self.public_key
        sock.curve_secretkey = self.secret_key
