"""Hostile tool calls from each tool's own input schema, and the checks every answer must pass.

:func:`arguments_for` turns a tool's JSON Schema into a Hypothesis strategy: mostly well-formed
arguments at and around their bounds, mixed with hostile strings (paths outside the roots,
metadata URLs, SQL-ish ids, NUL bytes, huge values), wrong types, missing required keys and unknown
keys. :class:`Auditor` runs one call through an in-memory MCP client and classifies the outcome:

* **crash** — the server logged an unexpected exception, or answered with the SDK's bare
  "Error executing tool X" (what it says when a tool raised something unanticipated);
* **hang** — the call did not return within ``call_timeout_s``;
* **leak** — an answer shows internals: a traceback, Rust/LanceDB/Arrow/DataFusion details,
  site-packages, or an absolute path that is neither under the allowed roots nor part of the
  caller's own arguments.

Shared by ``tests/tools/test_tool_fuzz.py`` (a few hundred calls) and ``bench/soak_fuzz.py`` (10k).
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
from hypothesis import strategies as st
from mcp.types import TextContent

HOSTILE_STRINGS = [
    "", " ", "..", "../../../../etc/passwd", "/etc/shadow", "/etc/hostname", "/proc/self/environ", "~/.ssh/id_rsa",
    "/root/.ssh/id_rsa", "file:///etc/passwd", "http://169.254.169.254/latest/meta-data/", "http://[::1]:22/",
    "rtsp://127.0.0.1:554/live", "https://localhost:8765/mcp", "http://0.0.0.0/", "ftp://x/y", "gopher://x/",
    "phone:../../etc", "phone:", "/dev/video0", "/dev/sda", "v4l2:///dev/mem", "' OR 1=1 --", "person_0001' OR '1'='1",
    "person_0001", "person_0002", "person_9999999999999999999999", "obs_000000000000", "trc_'; DROP TABLE traces; --",
    "kf_\x00", "\x00", "\u202e\u0000\ud7ff", "%s%s%n%x", "${HOME}", "{{7*7}}", "NaN", "-1", "1e309", "*", "%", "_",
    "a" * 5000, "/" + "a" * 300, "é" * 300, "\n\r\t", "Europe/Paris", "Mars/Olympus", "25:99", "00:00", "event_end",
]

ABS_PATH = re.compile(r"(?<![\w:/.~-])(/(?:[\w.@+-]+/)*[\w.@+-]+)")
INTERNALS = re.compile(r"Traceback|\.rs:\d|\bsrc/[\w/]+\.rs|lance(?:db)?::|lance-\d|\blance\b|datafusion|arrow::|"
                       r"pyarrow|site-packages|panicked|File \"", re.IGNORECASE)
#: text the answers may legitimately contain that the patterns above would otherwise flag
ALLOWED_PATHS = ("/dev/videoN", "/dev/video", "/mcp", "/phone", "/v1")


def _ref(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref:
        return defs.get(ref.rsplit("/", 1)[-1], {})
    return schema


def value_for(schema: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """A strategy for one value of ``schema``: mostly valid, sometimes hostile."""
    schema = _ref(schema, defs)
    junk = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                     st.sampled_from(HOSTILE_STRINGS), st.lists(st.sampled_from(HOSTILE_STRINGS), max_size=3),
                     st.dictionaries(st.sampled_from(["a", "type", "__class__"]), st.integers(), max_size=2))
    if depth > 4:
        return junk
    if "anyOf" in schema:
        return st.one_of(*[value_for(s, defs, depth + 1) for s in schema["anyOf"]])
    if "enum" in schema:
        return st.one_of(st.sampled_from(schema["enum"]), st.sampled_from(HOSTILE_STRINGS))
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if kind == "string":
        low, high = schema.get("minLength", 0), min(schema.get("maxLength", 80), 80)
        return st.one_of(st.sampled_from(HOSTILE_STRINGS), st.text(min_size=low, max_size=max(low, high)),
                         st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=16))
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -(2 ** 63)))
        high = schema.get("maximum", schema.get("exclusiveMaximum", 2 ** 63))
        edges = [low, high, low - 1, high + 1, 0, -1, 2 ** 63, -(2 ** 63) - 1]
        if kind == "integer":
            inner = st.integers(int(low), int(high))
        else:
            inner = st.floats(float(low), float(high), allow_nan=False)
            edges += [float("inf"), -float("inf"), 1e308]
        return st.one_of(inner, st.sampled_from(edges))
    if kind == "boolean":
        return st.one_of(st.booleans(), st.sampled_from(["true", 1, None]))
    if kind == "null":
        return st.none()
    if kind == "array":
        if "prefixItems" in schema:
            return st.tuples(*[value_for(s, defs, depth + 1) for s in schema["prefixItems"]]).map(list)
        items = value_for(schema.get("items", {}), defs, depth + 1)
        return st.lists(items, max_size=min(schema.get("maxItems", 6), 6))
    if kind == "object" or "properties" in schema:
        return object_for(schema, defs, depth + 1)
    return junk


def object_for(schema: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """A strategy for an object: required keys usually present, optional ones sometimes, junk keys rarely."""
    props = schema.get("properties", {})
    required = set(schema.get("required", []))

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, sub in props.items():
            keep = draw(st.integers(0, 9)) < (9 if name in required else 4)
            if keep:
                out[name] = draw(value_for(sub, defs, depth))
        if draw(st.integers(0, 19)) == 0:
            out[draw(st.sampled_from(["extra", "__proto__", "id'"]))] = draw(st.sampled_from(HOSTILE_STRINGS))
        return out

    return build()


def arguments_for(tool: Any) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments for one tool call (some well-formed, some hostile)."""
    schema = tool.input_schema or {}
    return object_for(schema, schema.get("$defs", {}))


def make_safe(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Keep a fuzzed call quick: long-poll waits are capped (a hang is then a real hang)."""
    if name == "notify_poll":
        wait = args.get("wait_s")
        if wait is None or (isinstance(wait, int | float) and not isinstance(wait, bool)):
            # the default (20 s) and any in-range wait are legitimate long polls, not hangs
            args["wait_s"] = min(abs(float(wait)), 0.2) if wait is not None and wait == wait else 0.0
    return args


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)


@dataclass
class Finding:
    kind: str  # crash | hang | leak
    tool: str
    args: dict[str, Any]
    detail: str


@dataclass
class Auditor:
    """Runs fuzzed calls through ``client`` and records crashes, hangs and leaks."""

    client: Any
    roots: tuple[str, ...]
    call_timeout_s: float = 10.0
    calls: int = 0
    errors: int = 0
    findings: list[Finding] = field(default_factory=list)
    slowest_s: float = 0.0

    def __post_init__(self) -> None:
        self._errors = _Errors()
        logging.getLogger().addHandler(self._errors)

    def close(self) -> None:
        logging.getLogger().removeHandler(self._errors)

    async def call(self, name: str, args: dict[str, Any]) -> None:
        args = make_safe(name, args)
        self.calls += 1
        before = len(self._errors.records)
        started = time.monotonic()
        try:
            with anyio.fail_after(self.call_timeout_s):
                result = await self.client.call_tool(name, args)
        except TimeoutError:
            self.findings.append(Finding("hang", name, args, f"no answer within {self.call_timeout_s:.0f} s"))
            return
        except Exception as exc:  # the client itself failing is a protocol-level crash
            self.findings.append(Finding("crash", name, args, f"client raised {type(exc).__name__}: {exc}"[:500]))
            return
        finally:
            self.slowest_s = max(self.slowest_s, time.monotonic() - started)
        texts = [b.text for b in result.content if isinstance(b, TextContent)]
        if result.structured_content is not None and result.is_error:
            texts.append(json.dumps(result.structured_content, default=str))
        text = "\n".join(texts)
        if result.is_error:
            self.errors += 1
            if text.strip() == f"Error executing tool {name}":
                self.findings.append(Finding("crash", name, args, "unexpected exception (SDK's bare error)"))
        for record in self._errors.records[before:]:
            self.findings.append(Finding("crash", name, args, f"{record.name}: {record.getMessage()}"[:500]))
        if result.is_error:
            leak = self.leak(text, args)
            if leak:
                self.findings.append(Finding("leak", name, args, leak))

    def leak(self, text: str, args: dict[str, Any]) -> str | None:
        """What in an error text reveals internals or the file system beyond the roots (``None``: nothing)."""
        given = json.dumps(args, ensure_ascii=False) + " " + " ".join(_strings(args))
        match = INTERNALS.search(text)
        if match and match.group(0).lower() not in given.lower():
            return f"internals {match.group(0)!r} in: {text[:300]}"
        for path in ABS_PATH.findall(text):
            if path in given or any(path.startswith(a) for a in ALLOWED_PATHS):
                continue
            if "..." in path and all(piece in given for piece in path.split("...")):
                continue  # the caller's own value, shortened by the validator ("/root/.ssh/id...sa")
            if any(path == r or path.startswith(r.rstrip("/") + "/") for r in self.roots):
                continue
            return f"path {path!r} in: {text[:300]}"
        return None

    def summary(self) -> dict[str, int]:
        """Counts of calls, error answers and findings by kind."""
        out = {"calls": self.calls, "error_answers": self.errors, "crashes": 0, "hangs": 0, "leaks": 0}
        for f in self.findings:
            out[{"crash": "crashes", "hang": "hangs", "leak": "leaks"}[f.kind]] += 1
        return out


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []
