"""Turning domain failures into tool errors the model can act on.

The SDK hides the text of unexpected exceptions from the client (it only says "Error executing
tool X"), so every failure a caller can fix is re-raised as a ``ToolError`` carrying our own
actionable message. Anything else is logged with its traceback and re-raised.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from mcp.server.mcpserver.exceptions import ToolError

from memory.errors import MemoryStoreError
from perception.errors import MediaError

logger = logging.getLogger(__name__)

#: failures caused by the call's arguments or the store's state, shown to the model verbatim
EXPECTED = (MemoryStoreError, MediaError, ValueError, KeyError)


@contextmanager
def tool_errors(tool: str) -> Iterator[None]:
    """Re-raise expected failures as ``ToolError``; log unexpected ones with a traceback."""
    try:
        yield
    except ToolError:
        raise
    except EXPECTED as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        raise ToolError(str(message)) from exc
    except Exception:
        logger.exception("tool %s failed unexpectedly", tool)
        raise
