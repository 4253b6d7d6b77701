"""Small real documents for tests: a PDF with a line of text, built byte by byte; one of several pages."""

from __future__ import annotations

import io

__all__ = ["pdf_with_pages", "pdf_with_text"]


def pdf_with_pages(*texts: str) -> bytes:
    """A PDF of a page per text, each as `pdf_with_text` shows it (joined with pypdf's writer)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for text in texts:
        writer.add_page(PdfReader(io.BytesIO(pdf_with_text(text))).pages[0])
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def pdf_with_text(text: str) -> bytes:
    """A one-page PDF that shows `text` in Helvetica (ASCII, no parentheses or backslashes)."""
    stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)
