"""The Infini-gram API's query syntax, shared by the client and ``quco serve stats``.

The hosted server treats a query string containing " AND " or " OR " as CNF: it splits on " AND " into
clauses, then each clause on " OR " into terms (so OR binds tighter than AND). Nothing else is special:
parentheses and quotes are literal text. An entity whose own text contains " AND " or " OR " would therefore
be split; :func:`compose` detects this by parsing its own output, and the caller then sends the clauses in a
structured form instead of a string.
"""

from __future__ import annotations

AND = " AND "
OR = " OR "

# Extension understood by `quco serve stats` (not by the hosted API): CNF given as text terms, never parsed.
QUERY_TERMS_FIELD = "query_terms"
# Extension: "document" asks `quco serve stats` for exact same-document co-occurrence.
COOCCURRENCE_FIELD = "cooccurrence"


def parse(query: str) -> list[list[str]]:
    """The server's reading of a query string: clauses of OR-terms (a simple query is one clause, one term)."""
    if AND not in query and OR not in query:
        return [[query]]
    return [clause.split(OR) for clause in query.split(AND)]


def compose(clauses: list[list[str]]) -> str | None:
    """A query string the server reads back as exactly ``clauses``; None when no string can say it."""
    query = AND.join(OR.join(terms) for terms in clauses)
    return query if parse(query) == clauses else None
