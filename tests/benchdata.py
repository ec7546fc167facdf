"""Tiny test data for the rasterize/validate/workflow tests: hand-made PDFs and small benches.

Real PDFs come from the bundled sample (``data/bench/olmocr-sample``); the broken ones (encrypted,
zero pages, corrupt) are written byte by byte here because no library on the CPU path makes them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "bench" / "olmocr-sample"


def write_raw_pdf(path: Path, objects: list[str], trailer_extra: str = "") -> Path:
    """Write a PDF from object bodies (object i+1 = objects[i]) with a correct xref table."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R {trailer_extra}>>\nstartxref\n{xref}\n%%EOF\n".encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))
    return path


def make_blank_pdf(path: Path, pages: int = 1, size=(200, 300)) -> Path:
    """A valid PDF of ``pages`` blank pages of ``size`` points."""
    kids = " ".join(f"{3 + i} 0 R" for i in range(pages))
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>"]
    objects += [f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {size[0]} {size[1]}] >>"] * pages
    return write_raw_pdf(path, objects)


def make_zero_page_pdf(path: Path) -> Path:
    """A well-formed PDF whose page tree is empty."""
    return write_raw_pdf(path, ["<< /Type /Catalog /Pages 2 0 R >>", "<< /Type /Pages /Kids [] /Count 0 >>"])


def make_encrypted_pdf(path: Path) -> Path:
    """A PDF encrypted with the standard handler whose user password is not empty."""
    o_val, u_val = "AB" * 32, "CD" * 32
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>",
        f"<< /Filter /Standard /V 1 /R 2 /Length 40 /O <{o_val}> /U <{u_val}> /P -44 >>",
    ]
    file_id = "0123456789ABCDEF0123456789ABCDEF"
    return write_raw_pdf(path, objects, trailer_extra=f"/Encrypt 4 0 R /ID [<{file_id}> <{file_id}>] ")


def make_corrupt_pdf(path: Path) -> Path:
    """Bytes that start like a PDF but are not one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"%PDF-1.7\nthis is not a PDF body\n")
    return path


# Three sample PDFs (one in a subfolder, one with 3 pages): 5 pages, every page tested.
SMALL_PDFS = ("mattsnotes.pdf", "earnings.pdf", "headers_footers/ff1fc6a205ad039139ce566851b6b260c929_pg1.pdf")


def sample_records(pdfs=SMALL_PDFS) -> list[dict]:
    """The sample's test records (dataset.jsonl) on the given PDFs."""
    records = []
    for line in (SAMPLE / "dataset.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            if record["pdf"] in pdfs:
                records.append(record)
    return records


def write_jsonl(path: Path, records: list) -> Path:
    """Write records (dicts, or raw strings written as they are) one per line."""
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def make_small_bench(root: Path, pdfs=SMALL_PDFS) -> Path:
    """A bench folder with a few sample PDFs and their tests (dataset.jsonl)."""
    for pdf in pdfs:
        target = root / "pdfs" / pdf
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(SAMPLE / "pdfs" / pdf, target)
    write_jsonl(root / "dataset.jsonl", sample_records(pdfs))
    return root
