"""search_documents: keyword search in one document collection.

Its parts of the pipeline: VISIBILITY resolves the collection as this turn
may see it; CHECKS bound the query; RUN searches; the hits (title and text)
are shaped like any result. Audited with the hit count only: neither the
query nor the text found.
"""

from __future__ import annotations

from django.utils.translation import gettext_noop

from audit.models import ResourceKind
from chat.document_search import search_collection
from chat.executor.pipeline import Call, Offer, Output, Target
from chat.executor.policy import ALWAYS_ALLOW
from chat.executor.reasons import Reason, Refused
from chat.executor.steps import summary_fields
from governance.visibility import collection_access
from owlai.tool_names import SEARCH_DOCUMENTS

MAX_SEARCH_QUERY_CHARS = 500


class SearchDocuments:
    name = SEARCH_DOCUMENTS
    resource_kind = ResourceKind.DOCUMENT_COLLECTION
    target_argument = "collection"
    result_key = "collection"
    unavailable = Reason(gettext_noop("no collection of that name is available"))
    failed = Reason(gettext_noop("search failed"))
    policy = ALWAYS_ALLOW
    run_state = None  # nothing kept between its calls

    def definition(self, offer: Offer) -> dict | None:
        collections = offer.resources.collections
        if not collections:
            return None
        return {
            "type": "function",
            "function": {
                "name": SEARCH_DOCUMENTS,
                "description": "Search a document collection by keywords and get the best matching documents.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "collection": {
                            "type": "string",
                            "description": "Name of the document collection.",
                            "enum": [c.name for c in collections],
                        },
                        "query": {"type": "string", "description": "Keywords to search for."},
                    },
                    "required": ["collection", "query"],
                },
            },
        }

    def audit_statement(self, args: dict) -> str:
        return ""  # the query is not recorded

    def summary(self, args: dict) -> dict[str, str]:
        return summary_fields(args, resource="collection", inputs=("query",))

    def resolve(self, ctx, name: str) -> Target | None:
        collection = collection_access(user_id=ctx.user_id, tier=ctx.tier, collection_name=name)
        return Target(name=collection.name, pk=collection.pk, resource=collection) if collection else None

    def check(self, call: Call) -> None:
        query = call.args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise Refused(Reason(gettext_noop("query is empty")))
        if len(query) > MAX_SEARCH_QUERY_CHARS:
            raise Refused(
                Reason(gettext_noop("query is longer than %(limit)s characters"), limit=MAX_SEARCH_QUERY_CHARS)
            )
        call.state["query"] = query

    def prepare(self, call: Call) -> None:
        pass

    def run(self, call: Call) -> Output:
        hits = search_collection(collection=call.target.resource, query=call.state["query"])
        return Output(
            payload={"hits": [{"title": h.title, "text": h.text} for h in hits]},
            row_count=len(hits),
            items="hits",
        )

    def lineage(self, call: Call, output: Output) -> None:
        return None  # documents carry no column classification: known values and detectors do the work
