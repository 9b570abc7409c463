"""PDF bombs built byte by byte for the worker-isolation tests; nothing binary is checked in.

Each is a small file that makes PDFium take memory or time without bound:

- ``recursive_xobject()``: a page whose Form XObject draws itself twice (632 bytes). PDFium
  expands the forms down to its nesting limit, 2 ** depth draws, and grows past 4 GB.
- ``tiny_glyphs(n)``: ``n`` one-point characters on one page, a line of 1,000 letters every
  0.77 pt (each line shifted, so PDFium does not merge them as fake bold). The text page and
  its words grow with ``n``: 1 M characters take ~600 MB and 13 s in-process, 8 M take GBs.
- ``deflate_bomb(n_mib)``: a content stream of ``n_mib`` MiB of spaces deflated ~1000:1
  (2 GiB in 2 MB); PDFium inflates it whole before it parses a single operator.

``python tests/corpus/pdf_bombs.py OUT_DIR`` writes the full-size ones, to measure them.
"""

from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path

_ADLER_MOD = 65521


def assemble(objects: list[bytes]) -> bytes:
    """A PDF of ``objects`` (object 1 is the catalog) with a correct cross-reference table."""
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


def _stream(body: bytes, extra: bytes = b"") -> bytes:
    return b"<< /Length %d%s >>\nstream\n" % (len(body), extra) + body + b"\nendstream"


def _one_page(resources: bytes, content: bytes, *extra: bytes) -> bytes:
    """Catalog, pages, one Letter page (object 3) drawing content stream 4, then ``extra``."""
    return assemble(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << %s >> /Contents 4 0 R >>"
            % resources,
            content,
            *extra,
        ]
    )


def recursive_xobject() -> bytes:
    """A page drawing Form XObject /X, which draws itself twice."""
    form = b" /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /XObject << /X 5 0 R >> >>"
    return _one_page(b"/XObject << /X 5 0 R >>", _stream(b"/X Do"), _stream(b"/X Do /X Do", form))


def tiny_glyphs(n: int) -> bytes:
    """A page showing ``n`` (rounded down to thousands) one-point Helvetica letters."""
    alphabet = b"abcdefghijklmnopqrstuvwxyz"
    lines = []
    for i in range(n // 1000):
        shifted = alphabet[i % 26 :] + alphabet[: i % 26]
        lines.append(b"0.013 -0.77 Td (" + (shifted * 39)[:1000] + b") Tj")
    content = zlib.compress(b"BT /F1 1 Tf 5 785 Td " + b" ".join(lines) + b" ET", 9)
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    return _one_page(b"/Font << /F1 5 0 R >>", _stream(content, b" /Filter /FlateDecode"), font)


def deflated_spaces(n_mib: int) -> bytes:
    """A zlib stream of ``n_mib`` MiB of spaces, built without compressing them all.

    After a full flush deflate starts afresh, so every further MiB compresses to the same
    bytes; the Adler-32 of ``n`` equal bytes ``c`` has a closed form: A = 1 + n c and
    B = n + c n (n + 1) / 2, both mod 65521 (RFC 1950).
    """
    chunk = b" " * (1 << 20)
    deflate = zlib.compressobj(9)
    first = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)  # with the zlib header
    again = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    size, byte = n_mib << 20, ord(" ")
    a = (1 + size * byte) % _ADLER_MOD
    b = (size + byte * size * (size + 1) // 2) % _ADLER_MOD
    final_block = b"\x03\x00"  # an empty final fixed-Huffman block
    return first + again * (n_mib - 1) + final_block + struct.pack(">I", (b << 16) | a)


def deflate_bomb(n_mib: int) -> bytes:
    """A page whose content stream inflates to ``n_mib`` MiB of spaces."""
    return _one_page(b"", _stream(deflated_spaces(n_mib), b" /Filter /FlateDecode"))


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    bombs = {
        "recursive_xobject.pdf": recursive_xobject(),
        "tiny_glyphs_8m.pdf": tiny_glyphs(8_000_000),
        "deflate_2gib.pdf": deflate_bomb(2048),
    }
    for name, data in bombs.items():
        (out / name).write_bytes(data)
        print(f"{out / name}: {len(data)} bytes")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
