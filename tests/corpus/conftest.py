"""Fixtures for the corpus tests: PDFs built by hand that the Helvetica writer cannot make.

The encrypted file uses the PDF standard security handler, revision 2 (40-bit RC4, PDF 1.4
spec, algorithms 3.1-3.4), so PDFium refuses it without the password and opens it with "secret".
The ligature files set "fi" and "fl" as single glyphs of Times-Roman, the way typesetters do.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

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


def _plain_pdf(content: bytes, font: bytes, extra: Sequence[bytes] = ()) -> bytes:
    """A one-page 400 x 200 pt PDF: objects 1-5 are catalog, pages, page, content, font F1."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 400 200] "
        b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        font,
        *extra,
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
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def build_ligature_pdf(to_unicode: bool) -> bytes:
    """A page reading "Specification of the floor" and "fine", codes 128 and 129 set as glyphs fi, fl.

    Without ``to_unicode`` PDFium reads the glyph names (fi -> U+FB01); with it, a ToUnicode CMap
    maps code 128 to U+FB01 and code 129 to the two letters "fl". Either way PDFium reports the
    letters of one glyph with the glyph's single box.
    """
    content = (
        b"BT /F1 24 Tf 20 120 Td (Speci\\200cation of the \\201oor) Tj ET "
        b"BT /F1 12 Tf 20 60 Td (\\200ne) Tj ET"
    )
    encoding = b"/Encoding << /BaseEncoding /WinAnsiEncoding /Differences [128 /fi 129 /fl] >>"
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Times-Roman " + encoding
    if not to_unicode:
        return _plain_pdf(content, font + b" >>")
    cmap = (
        b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap "
        b"/CMapName /Ligatures def 1 begincodespacerange <00> <FF> endcodespacerange "
        b"1 beginbfrange <20> <7E> <0020> endbfrange "
        b"2 beginbfchar <80> <FB01> <81> <0066006C> endbfchar "
        b"endcmap CMapName currentdict /CMap defineresource pop end end"
    )
    stream = b"<< /Length %d >>\nstream\n" % len(cmap) + cmap + b"\nendstream"
    return _plain_pdf(content, font + b" /ToUnicode 6 0 R >>", [stream])


@pytest.fixture(scope="session")
def encrypted_pdf() -> bytes:
    return build_encrypted_pdf()


@pytest.fixture(scope="session", params=[False, True], ids=["glyph-names", "to-unicode"])
def ligature_pdf(request: pytest.FixtureRequest) -> bytes:
    return build_ligature_pdf(request.param)
