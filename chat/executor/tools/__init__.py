"""The built-in tools, registered in the order the model is shown them."""

from chat.executor.registry import REGISTRY
from chat.executor.tools.documents import SearchDocuments
from chat.executor.tools.spill import ReadSpill
from chat.executor.tools.sql import RunSql

RUN_SQL_TOOL = REGISTRY.register(RunSql())
SEARCH_DOCUMENTS_TOOL = REGISTRY.register(SearchDocuments())
READ_SPILL_TOOL = REGISTRY.register(ReadSpill())
