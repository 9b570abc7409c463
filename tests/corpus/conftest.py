"""Fixtures for the corpus tests: a genuinely password-protected PDF built by hand.

The file uses the PDF standard security handler, revision 2 (40-bit RC4, PDF 1.4 spec,
algorithms 3.1-3.4), so PDFium refuses it without the password and opens it with "secret".
"""

from __future__ import annotations

import hashlib
import struct

import pytest

_PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")
USER_PASSWORD = "secret"


def _rc4(key: bytes, data: bytes) -> bytes:
    s = list(range(256))
    j = 0
    for i in range(256):
        j = (j + s[i] + key[i % len(key)]) % 256
        s[i], s[j] = s[j], s[i]
    i = j = 0
    out = bytearray()
    for byte in data:
        i = (i + 1) % 256
        j = (j + s[i]) % 256
        s[i], s[j] = s[j], s[i]
        out.append(byte ^ s[(s[i] + s[j]) % 256])
    return bytes(out)


def _padded(password: bytes) -> bytes:
    return (password + _PAD)[:32]


def build_encrypted_pdf(user: bytes = USER_PASSWORD.encode(), owner: bytes = b"owner") -> bytes:
    """A one-page PDF reading "Secret text", encrypted with RC4-40 (R2) under ``user``."""
    owner_value = _rc4(hashlib.md5(_padded(owner)).digest()[:5], _padded(user))  # algorithm 3.3
    permissions = -44
    file_id = b"evidra-test-0001"
    key = hashlib.md5(_padded(user) + owner_value + struct.pack("<i", permissions) + file_id).digest()[:5]
    user_value = _rc4(key, _PAD)  # algorithm 3.4
    content = b"BT /F1 12 Tf 72 700 Td (Secret text) Tj ET"
    object_key = hashlib.md5(key + (4).to_bytes(3, "little") + (0).to_bytes(2, "little")).digest()[:10]
    stream = _rc4(object_key, content)  # algorithm 3.1 for object 4
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P %d >>"
        % (owner_value.hex().encode(), user_value.hex().encode(), permissions),
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R /Encrypt 6 0 R /ID [<%s> <%s>] >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        file_id.hex().encode(),
        file_id.hex().encode(),
        xref,
    )
    return bytes(out)


@pytest.fixture(scope="session")
def encrypted_pdf() -> bytes:
    return build_encrypted_pdf()
