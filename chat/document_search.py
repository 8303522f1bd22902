"""Text search over one document collection.

PostgreSQL: full-text search (`simple` configuration, which splits on
whitespace and punctuation and so works for Korean text without a
dictionary), ranked, served by the GIN index of migration governance 0003.
SQLite (embedded profile): every query term must occur in title or body.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection as db
from django.db.models import Q

from governance.models import Document, DocumentCollection

SNIPPET_CHARS = 1200
MAX_HITS = 5


@dataclass(frozen=True)
class Hit:
    title: str
    text: str


def search_collection(*, collection: DocumentCollection, query: str, limit: int = MAX_HITS) -> list[Hit]:
    documents = Document.objects.filter(collection=collection)
    if db.vendor == "postgresql":
        found = _postgres(documents, query, limit)
    else:
        found = _fallback(documents, query, limit)
    return [Hit(title=d.title, text=d.body[:SNIPPET_CHARS]) for d in found]


def _postgres(documents, query: str, limit: int):
    from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVectorField
    from django.db.models.expressions import RawSQL

    # The same expression as the index, so PostgreSQL can use it.
    vector = RawSQL(
        "to_tsvector('simple'::regconfig, COALESCE(title, '') || ' ' || COALESCE(body, ''))",
        [],
        output_field=SearchVectorField(),
    )
    search = SearchQuery(query, config="simple", search_type="websearch")
    return (
        documents.annotate(fts=vector)
        .filter(fts=search)
        .annotate(rank=SearchRank(vector, search))
        .order_by("-rank", "id")[:limit]
    )


def _fallback(documents, query: str, limit: int):
    terms = [t for t in query.split() if t]
    if not terms:
        return []
    condition = Q()
    for term in terms:
        condition &= Q(title__icontains=term) | Q(body__icontains=term)
    return documents.filter(condition).order_by("id")[:limit]
