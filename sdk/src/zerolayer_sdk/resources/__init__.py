"""The resource classes behind the clients' attributes (client.chat.completions, ...)."""

from .account import Accounts, AsyncAccounts, AsyncOwnKeys, AsyncRequests, OwnKeys, Requests
from .admin import (
    Admin,
    AsyncAdmin,
    AsyncKeys,
    AsyncOperations,
    AsyncTenants,
    Keys,
    Operations,
    Tenants,
)
from .billing import AsyncInvoices, AsyncUsage, Invoices, Usage
from .chat import AsyncChat, AsyncChatCompletionStream, Chat, ChatCompletionStream
from .chunks import AsyncChunks, AsyncChunkStream, Chunks, ChunkStream
from .completions import AsyncCompletionStream, CompletionStream
from .conversations import AsyncConversations, AsyncItems, Conversations, Items
from .files import AsyncBatches, AsyncFiles, Batches, Files
from .models import AsyncModels, Models
from .responses import AsyncResponses, AsyncResponseStream, Responses, ResponseStream

__all__ = [
    "Files",
    "AsyncFiles",
    "Batches",
    "AsyncBatches",
    "Accounts",
    "AsyncAccounts",
    "Requests",
    "AsyncRequests",
    "OwnKeys",
    "AsyncOwnKeys",
    "Operations",
    "AsyncOperations",
    "Admin",
    "AsyncAdmin",
    "Keys",
    "AsyncKeys",
    "Tenants",
    "AsyncTenants",
    "Usage",
    "AsyncUsage",
    "Invoices",
    "AsyncInvoices",
    "Chat",
    "AsyncChat",
    "ChatCompletionStream",
    "AsyncChatCompletionStream",
    "Chunks",
    "AsyncChunks",
    "ChunkStream",
    "AsyncChunkStream",
    "CompletionStream",
    "AsyncCompletionStream",
    "Conversations",
    "AsyncConversations",
    "Items",
    "AsyncItems",
    "Models",
    "AsyncModels",
    "Responses",
    "AsyncResponses",
    "ResponseStream",
    "AsyncResponseStream",
]
