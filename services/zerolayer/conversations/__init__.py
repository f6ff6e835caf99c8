"""Conversation state in Redis, shared by every gateway replica: stored responses (the Responses
API's `previous_response_id` chains), conversations and their items (the Conversations API), each
owned by one tenant. The gateway's routes (gateway.responses, gateway.conversations) are the only
callers."""

from zerolayer.conversations.items import (
    COMPACTION,
    ItemError,
    Page,
    assistant_item,
    call_item,
    check_outputs,
    compactions,
    input_items,
    messages_of,
    new_id,
    page,
)
from zerolayer.conversations.store import (
    Busy,
    ConversationStore,
    Lineage,
    NotFound,
    Quota,
    QuotaExceeded,
    StoredResponse,
)

__all__ = [
    "COMPACTION",
    "Busy",
    "ConversationStore",
    "ItemError",
    "Lineage",
    "NotFound",
    "Page",
    "Quota",
    "QuotaExceeded",
    "StoredResponse",
    "assistant_item",
    "call_item",
    "check_outputs",
    "compactions",
    "input_items",
    "messages_of",
    "new_id",
    "page",
]
