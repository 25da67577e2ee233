"""The ``memory_ask`` tool: the QA agent, for hosts whose own model is weak at tool use.

Registered only when the manifest has a ``qa`` section. The agent itself lives in
:mod:`plugin.agent.ask` and is passed in by the composition root as an :class:`Asker`, so this module
depends on nothing above ``tools``. Without ``qa`` the host's own model answers with
memory_search / memory_get / memory_visual_evidence.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal, Protocol

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field

from tools.errors import tool_errors
from tools.results import itemize, structured

__all__ = ["ASK", "AskAnswer", "Asker", "register"]

logger = logging.getLogger(__name__)

#: reads memory only, but calls the configured model (an outside service)
ASK = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=False, open_world_hint=True)


class AskAnswer(BaseModel):
    """The agent's answer, the memories it rests on, and how it got there."""

    question: str
    answer: str
    memory_ids: list[str] = Field(description="cited memories that the agent actually retrieved")
    consulted: list[str] = Field(description="every memory id the agent saw, in order")
    rounds: int = Field(description="model calls that were made")
    finished: Literal["answered", "round_limit"] = Field(description="round_limit = forced to answer")
    tool_calls: list[str] = Field(description="function calls in order, e.g. search_memory, get_memory")
    prompt_tokens: int = Field(0, description="input tokens over all model calls (as the endpoint reports them)")
    completion_tokens: int = Field(0, description="output tokens over all model calls")


class Asker(Protocol):
    """Runs one QA episode over ``store``; raises ``ToolError`` when the model cannot be used."""

    async def __call__(self, store: Any, question: str, *, max_rounds: int | None = None,
                       camera: str | None = None, until: float | None = None) -> AskAnswer: ...


def register(server: MCPServer[Any], asker: Asker) -> None:
    """Add ``memory_ask`` to ``server``, answering through ``asker``."""

    async def memory_ask(
        question: Annotated[str, Field(description="a question about what the cameras saw, "
                                       "e.g. 'who handed the microphone to whom?'")],
        ctx: Context[Any],
        max_rounds: Annotated[int | None, Field(ge=1, le=20, description="tool rounds the agent may use; "
                                                "default from the manifest")] = None,
        camera: Annotated[str | None, Field(description="only look at this camera id")] = None,
        until: Annotated[float | None, Field(ge=0, le=1e9, description="only memories up to this media second")] = None,
    ) -> Annotated[CallToolResult, AskAnswer]:
        """Answer a question from memory with a dedicated agent that searches, opens neighbours and looks
        at key frames for you, then returns a short answer and the memory ids it rests on.

        Use it for questions that need several look-ups; for a single look-up call memory_search directly.
        """
        if not question.strip():
            raise ToolError("question is empty; ask something about what the cameras saw")
        with tool_errors("memory_ask"):
            store = ctx.request_context.lifespan_context.store
            result = await asker(store, question, max_rounds=max_rounds, camera=camera, until=until)
        cited = ", ".join(result.memory_ids) or "none"
        return structured(result, itemize(result.answer, [], f"Memories used: {cited}"))

    server.add_tool(memory_ask, annotations=ASK)
