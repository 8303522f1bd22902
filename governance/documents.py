"""Document collections and documents: each change through a service that
records it (audit.governed), so an upload, an edit or a deletion of what the
agent may search is on the record with who made it.

A document's body is recorded by digest and length, never as text: it can
hold anything the company wrote; the record says that it changed."""

from __future__ import annotations

import hashlib

from django.db import transaction

from audit.actors import Actor
from audit.changes import Fields
from audit.governed import GovernedModel, register_governed
from audit.models import EventKind, ResourceKind
from governance.models import Document, DocumentCollection, Role
from governance.services import roles_losing_grants


def body_digest(text: str) -> dict:
    return {"sha256": hashlib.sha256((text or "").encode("utf-8")).hexdigest()[:16], "chars": len(text or "")}


def _documents(collection_id) -> dict:
    rows = Document.objects.filter(collection_id=collection_id).order_by("pk").values_list("pk", "title", "body")
    return {"documents": [{"id": pk, "title": title, **body_digest(body)} for pk, title, body in rows]}


DOCUMENTS = GovernedModel(
    model=Document,
    resource_kind=ResourceKind.DOCUMENT,
    fields=Fields(plain=("collection", "title", "body")),
    shown={"body": body_digest},
    created=EventKind.DOCUMENT_CREATED,
    updated=EventKind.DOCUMENT_UPDATED,
    deleted=EventKind.DOCUMENT_DELETED,
)

# Exposure is not among the fields: it changes only by opening, which
# governance.exposure records on its own.
COLLECTIONS = GovernedModel(
    model=DocumentCollection,
    resource_kind=ResourceKind.DOCUMENT_COLLECTION,
    fields=Fields(plain=("name", "business_summary", "documents")),
    extra=_documents,
    created=EventKind.COLLECTION_CREATED,
    updated=EventKind.COLLECTION_UPDATED,
    deleted=EventKind.COLLECTION_DELETED,
)


def document_create(*, collection: DocumentCollection, title: str, body: str, actor: Actor) -> Document:
    document = Document(collection=collection, title=title, body=body)
    document.full_clean()
    DOCUMENTS.save(instance=document, actor=actor)
    return document


def document_update(*, document: Document, actor: Actor, title: str | None = None, body: str | None = None):
    if title is not None:
        document.title = title
    if body is not None:
        document.body = body
    document.full_clean()
    return DOCUMENTS.save(instance=document, actor=actor)


def document_save(*, instance: Document, actor: Actor, related=None):
    return DOCUMENTS.save(instance=instance, actor=actor, related=related)


def document_delete(*, instance: Document, actor: Actor):
    return DOCUMENTS.delete(instance=instance, actor=actor)


def collection_save(*, instance: DocumentCollection, actor: Actor, related=None):
    """Save a collection with its inline documents (`related`): one event
    with the before and after of its fields and documents."""
    return COLLECTIONS.save(instance=instance, actor=actor, related=related)


def collection_update(
    *, collection: DocumentCollection, actor: Actor, name: str | None = None, business_summary: str | None = None
):
    if name is not None:
        collection.name = name
    if business_summary is not None:
        collection.business_summary = business_summary
    collection.full_clean()
    return COLLECTIONS.save(instance=collection, actor=actor)


def collection_delete(*, instance: DocumentCollection, actor: Actor):
    """Delete a collection with its documents; roles that granted it lose it
    (each a permission-change event, like a deleted connection)."""
    with transaction.atomic(), roles_losing_grants(Role.objects.filter(document_collections=instance), actor=actor):
        event = COLLECTIONS.delete(instance=instance, actor=actor)
    return event


register_governed(Document, save=document_save, delete=document_delete)
register_governed(DocumentCollection, save=collection_save, delete=collection_delete)
