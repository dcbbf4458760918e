"""The same book as plain text, PDF and EPUB: do the answers quote the same evidence, and does
each PDF page / EPUB chapter cited for the quote hold it?

The books (bench/data, fetched by `python bench/fetch_text.py sensesensibility mansfieldpark
prideprejudice northangerabbey`): chapters 1-5 of Jane Austen's *Sense and Sensibility*
(`sense`, whose first run found two bugs, fixed since); chapters 1-2 of *Mansfield Park*
(`mansfield`, whose questions were written after those fixes and run once); chapters 1-3 of
*Pride and Prejudice* (`pride`, whose questions were written after plain text's hard-wrapped
paragraphs were joined — the fix Mansfield Park's run asked for — and run once); chapters 1-2
of *Northanger Abbey* (`northanger`, the needle benchmark's haystack, whose questions were
written after a PDF's typeset lines were joined too — found on Mansfield Park's PDF — and run
once). The PDF is typeset from Markdown by pandoc (ms) and groff (gropdf), the EPUB made by
pandoc, as a publisher's tools would; the plain text is the file itself. Each book's questions and each
answer's evidence were written before any answer was looked at. Every command is a real CLI
process.

    python bench/formats.py [--book sense|mansfield|pride|northanger] [--model PATH] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.provenance import save  # noqa: E402

DATA = ROOT / "bench" / "data"
MODELS = ROOT / ".cascade-test" / "models"
#: (question, words the evidence passage holds), written before any answer was seen.
SENSE = [
    ("In which county had the Dashwood family long been settled?", "settled in Sussex"),
    ("What was the name of the Dashwoods' residence?", "residence was at Norland Park"),
    ("How much did the old gentleman leave to each of the three girls?", "thousand pounds a-piece"),
    ("How old was the child to whom the Norland estate was secured?", "four years old"),
    ("How much money remained for Mr. Dashwood's widow and daughters?", "ten thousand pounds"),
    ("How much did John Dashwood think he would give his sisters?", "three thousand pounds"),
    ("Whose eldest son was Edward Ferrars?", "eldest son of a man"),
    ("What did Marianne say Edward had no taste for?", "no taste for drawing"),
    ("Where was the house that Mrs. Dashwood's relation offered her?", "property in Devonshire"),
    ("Who wrote the letter offering Mrs. Dashwood a cottage at Barton?", "John Middleton"),
]  # fmt: skip
MANSFIELD = [
    ("In which county was Mansfield Park?", "county of Northampton"),
    ("How much money did Miss Maria Ward have when she married Sir Thomas?",
     "seven thousand pounds"),
    ("Whom did Miss Frances marry?", "lieutenant of marines"),
    ("Who wrote a long and angry letter to Fanny about her marriage?", "long and angry letter"),
    ("How old was Mrs. Price's eldest boy?", "boy of ten"),
    ("How old was Fanny Price when she came to Mansfield?", "just ten years old"),
    ("How old was Julia Bertram?", "Julia Bertram was only twelve"),
    ("Where did Edmund find Fanny crying?", "attic stairs"),
    ("Which of her brothers did Fanny talk of most?", "William whom she talked of most"),
    ("What did Edmund send William under the seal?", "half a guinea"),
]  # fmt: skip
PRIDE = [
    ("Who has taken Netherfield, according to Mrs. Long?", "large fortune from the north of England"),
    ("How much a year is the new tenant of Netherfield said to have?", "four or five thousand a year"),
    ("When is the new tenant to take possession of Netherfield?", "possession before Michaelmas"),
    ("For which daughter does Mr. Bennet want to throw in a good word?", "good word for my little Lizzy"),
    ("What was Elizabeth doing when her father spoke of Mr. Bingley?", "employed in trimming a hat"),
    ("Which of the girls was scolded for coughing?", "keep coughing so, Kitty"),
    ("What colour was the coat Mr. Bingley wore?", "he wore a blue coat"),
    ("How many ladies and gentlemen was Mr. Bingley said to bring to the assembly?",
     "twelve ladies and seven gentlemen"),
    ("In which county was Mr. Darcy's large estate?", "large estate in Derbyshire"),
    ("What did Mr. Darcy say of Elizabeth when he looked at her?", "tolerable, but not handsome enough"),
]  # fmt: skip
NORTHANGER = [
    ("What was the first name of Catherine Morland's father?", "his name was Richard"),
    ("How many children did the Morlands have?", "family of ten children"),
    ("Which game did Catherine prefer to dolls?", "greatly preferred cricket"),
    ("At what age did Catherine begin to learn music?", "at eight years old she began"),
    ("Which poem did Catherine's mother take three months to teach her?", "Beggar's Petition"),
    ("In which county was the village of Fullerton?", "village in Wiltshire"),
    ("Why was Mr. Allen ordered to Bath?", "benefit of a gouty constitution"),
    ("How much money did Catherine's father give her for the journey?", "only ten guineas"),
    ("In which street were the Allens' lodgings in Bath?", "lodgings in Pulteney Street"),
    ("What did Mrs. Allen fear she had left behind at an inn?", "her clogs behind her"),
]  # fmt: skip
#: book: (text file, chapters, questions, title)
BOOKS = {
    "sense": ("sensesensibility.txt", 5, SENSE, "Sense and Sensibility"),
    "mansfield": ("mansfieldpark.txt", 2, MANSFIELD, "Mansfield Park"),
    "pride": ("prideprejudice.txt", 3, PRIDE, "Pride and Prejudice"),
    "northanger": ("northangerabbey.txt", 2, NORTHANGER, "Northanger Abbey"),
}


def words(text: str) -> list[str]:
    """Lower-case words, quotes and dashes as typesetting leaves them folded away."""
    text = text.replace("\u00ad", "").replace("-\n", "")
    return re.findall(r"[a-z0-9]+", text.lower())


def holds(whole: str, part: str, share: float = 0.9) -> bool:
    """Whether `whole` holds `part`'s words (at least `share` of them, allowing for a line
    break's hyphen or a word the typesetter split)."""
    have = set(words(whole))
    want = [w for w in words(part) if len(w) > 2]
    return bool(want) and sum(w in have for w in want) >= share * len(want)


def same(a: str, b: str) -> bool:
    """Two quoted passages are the same evidence: ≥ 80 % of their words shared."""
    x, y = set(words(a)), set(words(b))
    return bool(x | y) and len(x & y) >= 0.8 * len(x | y)


def books(work: Path, book: str = "sense") -> dict[str, Path]:
    """The three editions of the book's first chapters."""
    name, chapters, _, title = BOOKS[book]
    lines = (DATA / name).read_text(encoding="utf-8").splitlines()
    heads = [i for i, ln in enumerate(lines) if re.fullmatch(r"(?i)chapter [ivxlc\d]+", ln.strip())]
    body = lines[: heads[chapters]]
    txt = work / "sense.txt"
    txt.write_text("\n".join(body) + "\n", encoding="utf-8")
    md = "\n".join(
        f"# Chapter {line.split()[1]}" if i in heads else line
        for i, line in enumerate(body)
        if i >= heads[0]
    )
    src = work / "sense.md"
    src.write_text(md + "\n", encoding="utf-8")
    epub = work / "sense.epub"
    subprocess.run(["pandoc", str(src), "-o", str(epub), "--metadata",
                    f"title={title}"], check=True)  # fmt: skip
    ms = subprocess.run(["pandoc", "-f", "markdown", "-t", "ms", "-s", "-V", "fontfamily=T", str(src)],
                        capture_output=True, check=True).stdout  # fmt: skip
    pdf = work / "sense.pdf"
    pdf.write_bytes(subprocess.run(["groff", "-ms", "-mpdfmark", "-Tpdf", "-k"], input=ms,
                                   capture_output=True, check=True).stdout)  # fmt: skip
    return {"text": txt, "pdf": pdf, "epub": epub}


def run(args: list[str], home: Path, threads: int) -> tuple[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    env.update(CASCADE_HOME=str(home), CASCADE_THREADS=str(threads), PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cascade_cli", *args], capture_output=True,
                          text=True, env=env, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"cascade {' '.join(args)} failed:\n{proc.stderr}")
    return proc.stdout, time.perf_counter() - t0


def chapter_text(md: str, title: str) -> str:
    """The Markdown of chapter `title` (its heading to the next)."""
    parts = re.split(r"^# ", md, flags=re.M)
    return next((p for p in parts if p.startswith(title.strip())), "")


def cited_holds(kind: str, book: Path, source: dict[str, Any], passage: str, work: Path) -> bool:
    """Whether the location cited for the quote holds the quoted passage."""
    if kind == "pdf":
        page = source["page"]
        text = subprocess.run(["pdftotext", "-f", str(page), "-l", str(page), str(book), "-"],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
        return holds(text, passage)
    if kind == "epub":
        return holds(
            chapter_text((work / "sense.md").read_text(), source["section"] or ""), passage
        )
    first, last = source["lines"]
    lines = book.read_text(encoding="utf-8").splitlines()
    return holds("\n".join(lines[first - 1 : last]), passage)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--book", choices=sorted(BOOKS), default="sense")
    args = ap.parse_args()
    _, chapters, questions, title = BOOKS[args.book]
    work = ROOT / "bench" / ".work" / f"formats-{args.book}"
    home = work / "home"
    shutil.rmtree(work, ignore_errors=True)
    (home / "models").mkdir(parents=True)
    for f in MODELS.iterdir():
        (home / "models" / f.name).symlink_to(f)
    editions = books(work, args.book)
    model = ["--model", str(args.model)]
    tokens = {}
    for kind, path in editions.items():
        out, took = run(["ingest", str(path), "--name", kind, *model], home, args.threads)
        tokens[kind] = int(re.search(r"(\d+) tokens", out).group(1))  # type: ignore[union-attr]
        print(out.strip(), f"({took:.1f} s)", flush=True)
    rows: list[list[Any]] = []
    count = {k: {"evidence": 0, "holds": 0, "agree": 0} for k in editions}
    for question, evidence in questions:
        quotes: dict[str, str] = {}
        row: list[Any] = [question]
        for kind, path in editions.items():
            out, _ = run(["ask", kind, question, "--json", "--max-tokens", "16", *model],
                         home, args.threads)  # fmt: skip
            data = json.loads(out)
            quote = data["passages"][0] if data["passages"] else ""
            quotes[kind] = quote
            cited = [s for s in data["sources"] if s["quoted"]]
            ok = bool(quote) and bool(cited) and cited_holds(kind, path, cited[0], quote, work)
            has = holds(quote, evidence, 1.0)
            agree = kind == "text" or same(quote, quotes["text"])
            for key, hit in (("evidence", has), ("holds", ok), ("agree", agree)):
                count[kind][key] += hit
            where = "" if not cited else (
                f"p. {cited[0]['page']}" if kind == "pdf" else
                (cited[0]["section"] or "") if kind == "epub" else
                "lines {}–{}".format(*cited[0]["lines"])
            )  # fmt: skip
            row.append(f"{'evidence' if has else '—'}, {where}{'' if ok else ' ✗'}"
                       + ("" if kind == "text" else (" =" if agree else " ≠")))  # fmt: skip
        rows.append(row)
    n = len(questions)
    rows.append(["**quote holds the evidence / citation holds the quote / same quote as text**",
                 *(f"**{c['evidence']}/{n} · {c['holds']}/{n} · {c['agree']}/{n}**"
                   for c in count.values())])  # fmt: skip
    save(
        f"formats-{args.book}",
        topic="recall",
        title=f"One book as text, PDF and EPUB: {chapters} chapters of {title} ({args.model.name})",
        target="every cited page / chapter holds the quoted text; the PDF and EPUB quote the same "
        "evidence as the plain text for ≥ 90 % of the questions",
        columns=["question", "text", "pdf", "epub"],
        rows=rows,
        models=[args.model],
        notes="Each cell: whether the quoted passage holds the evidence, the location cited for "
        "the quote (✗: it does not hold the quote), and (= / ≠) whether the quote is the one the "
        "plain text's ask quoted (≥ 80 % of words shared). Tokens ingested: "
        + ", ".join(f"{k} {v}" for k, v in tokens.items())
        + f"; window 4096, block 512, {args.threads} threads; `ask --json --max-tokens 16`.",
        extra={"count": count, "tokens": tokens},
    )


if __name__ == "__main__":
    main()
