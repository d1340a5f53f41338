"""Signing chorus packages with Ed25519 keys (the cryptography package, OpenSSL underneath).

A signature is one record per key, ``.data/chorus/signatures/<key id>.json``, holding the
Ed25519 signature of ``"chorus-package-signature-v1:" + sha256(manifest record)`` in hex.
The manifest lists every record's SHA-256, so the signature covers the whole archive;
chorus-server ``--trusted-keys DIR`` verifies it (C++: package/src/signature.cc). The
layout is specified in docs/package-format.md ("Signed archives").
"""

import base64
import hashlib
import json
import os
import shutil
import tempfile
import zipfile

from chorus.package import _format as fmt


class SigningError(ValueError):
    """A key or an archive cannot be used; the message says why and what to do."""


def _crypto():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as e:
        raise SigningError("signing needs the cryptography package (pip install "
                           "cryptography)") from e
    return serialization, ed25519


def key_id(public_key) -> str:
    """The key's id: the first hex digits of the SHA-256 of its raw 32 bytes."""
    serialization, _ = _crypto()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:fmt.KEY_ID_HEX_DIGITS]


def keygen(stem: str) -> tuple[str, str, str]:
    """Writes STEM.key.pem (private, owner-only) and STEM.pub.pem (public: what servers
    trust). Returns (private path, public path, key id). Refuses to overwrite."""
    serialization, ed25519 = _crypto()
    private_path, public_path = stem + ".key.pem", stem + ".pub.pem"
    for path in (private_path, public_path):
        if os.path.exists(path):
            raise SigningError(f"{path} exists; choose another name (keys are never "
                               "overwritten)")
    private = ed25519.Ed25519PrivateKey.generate()
    private_pem = private.private_bytes(serialization.Encoding.PEM,
                                        serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption())
    public_pem = private.public_key().public_bytes(serialization.Encoding.PEM,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo)
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private_pem)
    with open(public_path, "wb") as f:
        f.write(public_pem)
    return private_path, public_path, key_id(private.public_key())


def load_private_key(path: str):
    serialization, ed25519 = _crypto()
    try:
        with open(path, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
    except FileNotFoundError as e:
        raise SigningError(f"the key {path} does not exist") from e
    except (ValueError, TypeError) as e:
        raise SigningError(f"{path} is not an unencrypted private key in PEM "
                           "(chorus-package keygen makes one)") from e
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise SigningError(f"{path} is not an Ed25519 key (chorus signs with Ed25519)")
    return key


def _manifest_name(archive: zipfile.ZipFile, path: str) -> str:
    for name in archive.namelist():
        top, _, rest = name.partition("/")
        if rest == fmt.MANIFEST_RECORD:
            return name
    raise SigningError(f"{path} has no chorus manifest: only chorus packages are signed "
                       "(convert it first: chorus-package create --from-...)")


def sign(path: str, key_path: str, output: str = "") -> str:
    """Adds the key's signature to the chorus package at `path` (written to `output`, or
    replacing `path` atomically: a server mapping it keeps its old copy). Returns the key
    id. The caller validates the archive first (the C++ reader's checks)."""
    key = load_private_key(key_path)
    ident = key_id(key.public_key())
    with zipfile.ZipFile(path) as archive:
        manifest_name = _manifest_name(archive, path)
        top = manifest_name[:manifest_name.index("/") + 1]
        record = f"{top}{fmt.SIGNATURE_DIRECTORY}{ident}.json"
        if record in archive.namelist():
            raise SigningError(f"{path} is already signed by key {ident}")
        digest = hashlib.sha256(archive.read(manifest_name)).hexdigest()
    signature = key.sign((fmt.SIGNED_MESSAGE_PREFIX + digest).encode())
    body = json.dumps({"format": fmt.SIGNATURE_FORMAT_NAME,
                       "version": fmt.SIGNATURE_FORMAT_VERSION,
                       "algorithm": fmt.SIGNATURE_ALGORITHM, "key_id": ident,
                       "manifest_sha256": digest,
                       "signature": base64.b64encode(signature).decode()}, indent=1)
    target = os.path.abspath(output or path)
    fd, scratch = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".signing-")
    os.close(fd)
    try:
        shutil.copyfile(path, scratch)
        # Appending leaves every existing record (and its 64-byte alignment) in place.
        with zipfile.ZipFile(scratch, "a") as archive:
            archive.writestr(zipfile.ZipInfo(record, date_time=(1980, 1, 1, 0, 0, 0)), body,
                             compress_type=zipfile.ZIP_STORED)
        os.chmod(scratch, os.stat(path).st_mode & 0o777)
        os.replace(scratch, target)
    except BaseException:
        os.unlink(scratch)
        raise
    return ident
