"""Search results on the terminal: ranked hits per query, with a snippet of each stored text."""
from __future__ import annotations

from .console import console, snippet


def hits(results: list[list[dict]]) -> None:
    """``results``: per query, the hits of federated search (``id``, ``score``, ``source``, maybe ``text``)."""
    from rich.markup import escape

    con = console()
    for qi, rows in enumerate(results):
        con.print(f"[bold]query {qi}[/]", markup=True)
        for rank, r in enumerate(rows, 1):
            text = f"  {escape(snippet(r['text']))}" if "text" in r else ""
            con.print(f"  {rank:3d}. {escape(str(r['id']))}  {r['score']:.4f}{text}  [dim]{r['source']}[/]",
                      markup=True)


def text_hits(results: list[list[dict]], texts) -> None:
    """``results``: per query text of ``texts``, its hits (``id``, ``score``, maybe ``text``)."""
    from rich.markup import escape

    con = console()
    for text, rows in zip(texts, results):
        con.print(f"[bold]{escape(text)}[/]", markup=True)
        for rank, h in enumerate(rows, 1):
            shown = f"  {escape(snippet(h['text']))}" if "text" in h else ""
            con.print(f"  {rank:3d}. {escape(str(h['id']))}  {h['score']:.4f}{shown}", markup=True)
