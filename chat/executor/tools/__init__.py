"""The built-in tools, registered in the order the model is shown them."""

from chat.executor.registry import REGISTRY
from chat.executor.tools.connectors import ConnectorToolSource
from chat.executor.tools.documents import SearchDocuments
from chat.executor.tools.spill import ReadSpill
from chat.executor.tools.sql import RunSql

RUN_SQL_TOOL = REGISTRY.register(RunSql())
SEARCH_DOCUMENTS_TOOL = REGISTRY.register(SearchDocuments())
READ_SPILL_TOOL = REGISTRY.register(ReadSpill())
# Connector tools (`<connector>__<tool>`, search_connector_tools): found by name
# at run time, after the built-in ones.
CONNECTOR_TOOLS = REGISTRY.add_source(ConnectorToolSource())
