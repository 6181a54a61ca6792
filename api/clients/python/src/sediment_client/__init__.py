"""A typed client of the sediment long-term memory API (see api/README.md in the sediment repository).

    from sediment_client import Client

    with Client("http://127.0.0.1:8080", api_key="sdmk_…", agent="support-bot", user="ana") as memory:
        memory.append("chat-42", [{"role": "user", "content": "I moved to Lisbon."}])
        context = memory.recall("where do I live?", session_id="chat-42").context()
"""

from .client import AsyncClient, Client
from .errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    SedimentError,
    ServerError,
    Unauthorized,
    Unavailable,
    Unreachable,
)
from .models import (
    AppendedTurn,
    ImportResult,
    Issue,
    Memory,
    MemoryHit,
    MemoryPage,
    MemorySearchResult,
    Persona,
    RecallItem,
    RecallResult,
    Scene,
    SceneDetail,
    SearchHit,
    SearchResult,
    StablePart,
    Turn,
)

__version__ = "0.1.0"
__all__ = [
    "AppendedTurn",
    "AsyncClient",
    "Client",
    "Conflict",
    "Forbidden",
    "ImportResult",
    "InvalidRequest",
    "Issue",
    "Memory",
    "MemoryHit",
    "MemoryPage",
    "MemorySearchResult",
    "NotFound",
    "Persona",
    "RateLimited",
    "RecallItem",
    "RecallResult",
    "Scene",
    "SceneDetail",
    "SearchHit",
    "SearchResult",
    "SedimentError",
    "ServerError",
    "StablePart",
    "Turn",
    "Unauthorized",
    "Unavailable",
    "Unreachable",
]
