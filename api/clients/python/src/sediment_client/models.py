"""The API's answers as typed objects. Each model names its OpenAPI schema (`SCHEMA`); the test
suite checks every model's fields against the served `/openapi.json`, so a change of the API
fails here rather than in a user's program. Fields the API adds later are ignored when parsing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Dict, List, Optional, Tuple, Type, TypeVar

T = TypeVar("T", bound="Model")


def _time(value: Any) -> Any:
    if isinstance(value, str):
        # Python before 3.11 does not read a "Z" suffix.
        return datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value)
    return value


@dataclass
class Model:
    """Parsing shared by the models: `TIMES` are RFC 3339 strings made datetimes, `NESTED` maps a
    field to the model of its object or of its list's items."""

    SCHEMA: ClassVar[str] = ""
    TIMES: ClassVar[Tuple[str, ...]] = ()
    NESTED: ClassVar[Dict[str, Type["Model"]]] = {}

    @classmethod
    def from_dict(cls: Type[T], data: Dict[str, Any]) -> T:
        values = {}
        for field in dataclasses.fields(cls):
            value = data.get(field.name)
            if field.name in cls.TIMES:
                value = _time(value)
            nested = cls.NESTED.get(field.name)
            if nested is not None and value is not None:
                value = [nested.from_dict(v) for v in value] if isinstance(value, list) else nested.from_dict(value)
            values[field.name] = value
        return cls(**values)


@dataclass
class AppendedTurn(Model):
    SCHEMA: ClassVar[str] = "AppendedTurn"
    TIMES: ClassVar[Tuple[str, ...]] = ("created_at",)
    id: str
    seq: int
    created_at: datetime


@dataclass
class Turn(Model):
    SCHEMA: ClassVar[str] = "Turn"
    TIMES: ClassVar[Tuple[str, ...]] = ("created_at",)
    id: str
    session_id: str
    seq: int
    role: str
    content: str
    metadata: Dict[str, Any]
    client_id: Optional[str]
    created_at: datetime
    task: Optional[str]


@dataclass
class SearchHit(Turn):
    SCHEMA: ClassVar[str] = "SearchItem"
    score: float = 0.0


@dataclass
class Issue(Model):
    """Why part of an answer is missing (a backend failed, the deadline passed)."""

    SCHEMA: ClassVar[str] = "RecallIssue"
    code: str
    message: str


@dataclass
class SearchResult(Model):
    SCHEMA: ClassVar[str] = "SearchResponse"
    NESTED: ClassVar[Dict[str, Type[Model]]] = {"items": SearchHit, "errors": Issue}
    items: List[SearchHit]
    strategy: str
    errors: List[Issue]


@dataclass
class StablePart(Model):
    SCHEMA: ClassVar[str] = "StablePart"
    persona: str
    scene_navigation: str
    tools_guide: str


@dataclass
class RecallItem(Model):
    SCHEMA: ClassVar[str] = "RecallItem"
    id: str
    kind: str
    content: str
    score: float
    source: Dict[str, Any]


@dataclass
class RecallResult(Model):
    SCHEMA: ClassVar[str] = "RecallResponse"
    NESTED: ClassVar[Dict[str, Type[Model]]] = {"stable": StablePart, "dynamic": RecallItem, "errors": Issue}
    stable: StablePart
    dynamic: List[RecallItem]
    truncated: bool
    errors: List[Issue]
    strategy: str

    def context(self) -> str:
        """The dynamic items as one block, for the user message's prefix."""
        return "\n".join(item.content for item in self.dynamic)


@dataclass
class Memory(Model):
    SCHEMA: ClassVar[str] = "Memory"
    TIMES: ClassVar[Tuple[str, ...]] = ("created_at", "updated_at")
    id: str
    content: str
    category: str
    priority: int
    scene: Optional[str]
    status: str
    occurred_at: Optional[str]
    source_message_ids: List[str]
    session_id: str
    superseded_by: Optional[str]
    task: Optional[str]
    created_at: datetime
    updated_at: datetime


@dataclass
class MemoryHit(Memory):
    SCHEMA: ClassVar[str] = "MemoryHit"
    score: float = 0.0


@dataclass
class MemorySearchResult(Model):
    SCHEMA: ClassVar[str] = "MemorySearchResponse"
    NESTED: ClassVar[Dict[str, Type[Model]]] = {"items": MemoryHit, "errors": Issue}
    items: List[MemoryHit]
    errors: List[Issue]
    strategy: str


@dataclass
class MemoryPage(Model):
    SCHEMA: ClassVar[str] = "MemoryList"
    NESTED: ClassVar[Dict[str, Type[Model]]] = {"items": Memory}
    items: List[Memory]
    #: The `cursor` of the next page; None on the last.
    next: Optional[str]


@dataclass
class Scene(Model):
    SCHEMA: ClassVar[str] = "Scene"
    TIMES: ClassVar[Tuple[str, ...]] = ("created_at", "updated_at")
    id: str
    name: str
    overview: str
    tags: List[str]
    version: int
    path: str
    created_at: datetime
    updated_at: datetime


@dataclass
class SceneDetail(Scene):
    SCHEMA: ClassVar[str] = "SceneDetail"
    #: The scene document (Markdown).
    content: str = ""
    provenance: List[Dict[str, Any]] = dataclasses.field(default_factory=list)


@dataclass
class Persona(Model):
    SCHEMA: ClassVar[str] = "Persona"
    TIMES: ClassVar[Tuple[str, ...]] = ("updated_at",)
    #: The persona document (Markdown).
    content: str
    version: int
    updated_at: Optional[datetime]
    provenance: List[Dict[str, Any]]


@dataclass
class ImportResult(Model):
    SCHEMA: ClassVar[str] = "ImportView"
    #: Lines read, the header and end line included.
    lines: int
    #: Rows of each kind the stream held.
    read: Dict[str, int]
    #: Rows of each kind that were new; a second import of a stream inserts nothing.
    inserted: Dict[str, int]


#: Every model, for the test that checks them against the OpenAPI document.
ALL: Tuple[Type[Model], ...] = (
    AppendedTurn,
    Turn,
    SearchHit,
    Issue,
    SearchResult,
    StablePart,
    RecallItem,
    RecallResult,
    Memory,
    MemoryHit,
    MemorySearchResult,
    MemoryPage,
    Scene,
    SceneDetail,
    Persona,
    ImportResult,
)
