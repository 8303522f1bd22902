"""read_spill: page through a result that was too big to show whole.

A spilled result is a file in the conversation's own spill folder, written
by the shaping stage after masking (chat.executor.shaping). Its parts of the
pipeline:

    VISIBILITY  the file name must be one the shaping stage writes (no path,
                no `..`, no link) and exist in THIS conversation's folder;
                the resource the result came from must still be one this
                turn may use (its tool resolves it again: a grant revoked
                since, or a tier that may not see it, hides the file too).
                Another conversation's file, a missing one and a hidden one
                read the same.
    CHECKS      offset and limit are whole numbers in range
    RUN         the page: at most `limit` items from `offset`, fewer when they
                would not fit the model's context
    SHAPING     like any result (the content is masked already; known values
                learnt since are replaced too); a page is never spilled again
"""

from __future__ import annotations

import json

from django.conf import settings
from django.utils.translation import gettext_noop

from audit.models import ResourceKind
from chat.executor.pipeline import Call, Offer, Output, Target
from chat.executor.policy import ALWAYS_ALLOW
from chat.executor.reasons import Reason, Refused
from chat.executor.shaping import SPILL_NAME, page, spill_files, spill_folder
from owlai.tool_names import READ_SPILL

MAX_LIMIT = 200


class ReadSpill:
    name = READ_SPILL
    resource_kind = ResourceKind.SPILL_FILE
    target_argument = "file"
    result_key = "file"
    unavailable = Reason(gettext_noop("no spill file of that name is available"))
    failed = Reason(gettext_noop("reading the spill file failed"))
    policy = ALWAYS_ALLOW
    run_state = None  # nothing kept between its calls

    def definition(self, offer: Offer) -> dict | None:
        # Offered once the conversation has a spilled result (the agent loop
        # asks again before every model call).
        if not spill_files(offer.ctx.conversation_id):
            return None
        return {
            "type": "function",
            "function": {
                "name": READ_SPILL,
                "description": (
                    "Read more of a result that was too big to show whole: the items (rows, hits) "
                    "from `offset`, at most `limit` of them. `file` is the name given in the result's `spilled`."
                ),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "file": {"type": "string", "description": "The spilled result's file name."},
                        "offset": {"type": "integer", "minimum": 0, "description": "First item to read (0-based)."},
                        "limit": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": MAX_LIMIT,
                            "description": "How many items to read.",
                        },
                    },
                    "required": ["file"],
                },
            },
        }

    def audit_statement(self, args: dict) -> str:
        return ""

    def summary(self, args: dict) -> dict[str, str]:
        return {}  # the step names the tool; the file and page are its own bookkeeping

    def resolve(self, ctx, name: str) -> Target | None:
        from chat.executor.registry import REGISTRY

        if not ctx.conversation_id or not SPILL_NAME.fullmatch(name):
            return None
        folder = spill_folder(ctx.conversation_id)
        path = folder / name
        if path.is_symlink() or not path.is_file() or path.resolve().parent != folder.resolve():
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
        origin = record["origin"]
        tool = REGISTRY.find(ctx, origin["tool"])
        if tool is None or tool.name == READ_SPILL or tool.resolve(ctx, origin["target"]) is None:
            return None
        if not isinstance(record.get("result"), dict) or not isinstance(record["result"].get(record["items"]), list):
            raise ValueError("spill file without its items")
        return Target(name=name, pk=None, resource=record)

    def check(self, call: Call) -> None:
        offset = call.args.get("offset", 0)
        limit = call.args.get("limit", settings.OWLAI_SPILL_PREVIEW_ROWS)
        if type(offset) is not int or offset < 0:
            raise Refused(Reason(gettext_noop("offset must be a whole number of at least 0")))
        if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
            raise Refused(Reason(gettext_noop("limit must be a whole number from 1 to %(max)s"), max=MAX_LIMIT))
        call.state.update(offset=offset, limit=limit)

    def prepare(self, call: Call) -> None:
        pass

    def run(self, call: Call) -> Output:
        record = call.target.resource
        items = record["items"]
        result = {k: v for k, v in record["result"].items() if k != "spilled"}
        total = len(result[items])
        paged, returned = page(result, items, offset=call.state["offset"], limit=call.state["limit"])
        return Output(
            payload=paged,
            facts={"offset": call.state["offset"], "returned": returned, "total": total},
            row_count=returned,
            items=None,  # a page is sized to fit; never spilled again
        )

    def lineage(self, call: Call, output: Output) -> None:
        return None  # masked when spilled; known values and detectors run again over the page
