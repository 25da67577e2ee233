"""The manifest: one strict pydantic tree configuring the whole server.

A manifest is YAML (``.yaml``/``.yml``) or TOML (``.toml``). Unknown keys are rejected, every
value is typed and bounded, and secrets appear only as ``${ENV}`` or ``${ENV:default}``
references, substituted at load time. :func:`load_manifest` reports every problem at once, each
with its key path and a fix, through :class:`plugin.errors.ManifestError`.

With no manifest at all, :func:`default_manifest` gives the embedded default: a LanceDB store in
the user's data directory, the local MiniLM embedder, YuNet faces and no VLM.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from platformdirs import user_data_dir
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from perception.settings import (
    NoBackendConfig,
    PerceptionConfig,
    SSDObjectsConfig,
    Strict,
    YOLOObjectsConfig,
    YuNetFacesConfig,
)
from plugin.errors import ManifestError, ManifestProblem
from plugin.manifest_limits import (
    MAX_DEPTH,
    MAX_MANIFEST_BYTES,
    YAMLLimitError,
    literal_secrets,
    load_yaml_bounded,
    nesting_depth,
)
from plugin.manifest_sections import DashboardConfig, MqttChannelConfig, ProactiveConfig

__all__ = [
    "Manifest",
    "MemoryConfig",
    "NotificationsConfig",
    "ObjectStorageConfig",
    "PerceptionConfig",
    "ProactiveConfig",
    "QAConfig",
    "RuleConfig",
    "SemanticConfig",
    "ServerConfig",
    "default_manifest",
    "default_store_uri",
    "load_manifest",
    "parse_manifest",
]

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")


# ---------------------------------------------------------------------------------- embedders


class MiniLMEmbedderConfig(Strict):
    """The packaged all-MiniLM-L6-v2 int8 ONNX model (384-d); works offline."""

    type: Literal["minilm"] = "minilm"


class HashEmbedderConfig(Strict):
    """A deterministic hashing embedder: for tests and fully offline dev runs, not for quality."""

    type: Literal["hash"] = "hash"
    dim: int = Field(64, ge=8, le=4096, description="vector dimension")


class OpenAIEmbedderConfig(Strict):
    """Any OpenAI-compatible ``/v1/embeddings`` endpoint."""

    type: Literal["openai"] = "openai"
    base_url: str = Field(description="e.g. https://api.openai.com/v1 or http://127.0.0.1:11434/v1")
    model: str = Field(description="embedding model name")
    api_key: SecretStr = Field(SecretStr(""), description="use ${ENV} — never write the key itself")
    dim: int = Field(ge=8, le=8192, description="dimension the model returns")
    timeout_s: float = Field(30.0, gt=0, le=600)


EmbedderConfig = Annotated[
    MiniLMEmbedderConfig | HashEmbedderConfig | OpenAIEmbedderConfig, Field(discriminator="type")
]


class ObjectStorageConfig(Strict):
    """How to reach an object store (``memory.uri: s3://bucket/prefix``): S3, MinIO, Ceph, R2, …

    Unset keys fall back to the usual ``AWS_*`` environment variables. Credentials are written as
    ``${ENV}``, never as literals.
    """

    endpoint: str | None = Field(None, description="S3-compatible endpoint, e.g. http://minio.lan:9000; "
                                 "null = AWS S3")
    region: str | None = Field(None, description="bucket region (MinIO and moto accept any, e.g. us-east-1)")
    access_key_id: str | None = Field(None, description="use ${ENV}, e.g. ${AWS_ACCESS_KEY_ID}")
    secret_access_key: SecretStr | None = Field(None, description="use ${ENV}, e.g. ${AWS_SECRET_ACCESS_KEY}")
    session_token: SecretStr | None = Field(None, description="use ${ENV}")
    allow_http: bool = Field(False, description="allow a plain-HTTP endpoint (a LAN MinIO); HTTPS otherwise")
    options: dict[str, str] = Field(default_factory=dict, description="further LanceDB storage options, "
                                    "passed as given (gs://, az://, timeouts, …)")

    def storage_options(self) -> dict[str, str]:
        """The LanceDB ``storage_options`` of this section (secrets revealed)."""
        out = {
            "aws_endpoint": self.endpoint,
            "aws_region": self.region,
            "aws_access_key_id": self.access_key_id,
            "aws_secret_access_key": self.secret_access_key.get_secret_value() if self.secret_access_key else None,
            "aws_session_token": self.session_token.get_secret_value() if self.session_token else None,
            "allow_http": "true" if self.allow_http else None,
        }
        return {**{k: v for k, v in out.items() if v}, **self.options}


class MemoryConfig(Strict):
    """Where memory lives and how text is embedded."""

    uri: str | None = Field(
        None,
        description="LanceDB URI: a directory, or s3://… / gs://…; default: the user's data directory",
    )
    storage: ObjectStorageConfig = Field(default_factory=ObjectStorageConfig,
                                         description="endpoint and credentials of an object-store uri")
    embedder: EmbedderConfig = Field(default_factory=MiniLMEmbedderConfig)


# ---------------------------------------------------------------------------------- providers


class VLMStageConfig(Strict):
    """The budget of one VLM stage."""

    max_output_tokens: int = Field(800, ge=16, le=32768)
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = Field(
        None, description="sent only when set (reasoning models)"
    )
    timeout_s: float | None = Field(None, gt=0, le=600, description="default: vlm.timeout_s")


class OpenAIVLMConfig(Strict):
    """An OpenAI-compatible vision-language model (OpenAI, vLLM, Ollama, LM Studio)."""

    type: Literal["openai"] = "openai"
    base_url: str
    model: str
    api_key: SecretStr = Field(SecretStr(""), description="use ${ENV}")
    timeout_s: float = Field(60.0, gt=0, le=600)
    max_output_tokens: int = Field(800, ge=16, le=32768)
    max_concurrency: int = Field(2, ge=1, le=64)
    max_attempts: int = Field(3, ge=1, le=10, description="attempts per call; retried only on 429/5xx/invalid JSON")
    stages: dict[str, VLMStageConfig] = Field(
        default_factory=dict, description="per-stage budgets by name: segment, identity, consolidate, chapter"
    )


class SourceConfig(Strict):
    """A media source the background worker ingests (files now; live sources later)."""

    uri: str = Field(description="file path, rtsp://, http(s)://, /dev/videoN or a folder")
    camera_id: str | None = Field(None, description="default: derived from the source")
    enabled: bool = True
    options: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="source options: mode (offline_quality | live_latency), open_timeout_s, read_timeout_s, "
        "rtsp_transport, stall_s, backoff_s, backoff_max_s, image_interval_s, video_size, framerate, input_format",
    )


class HTTPConfig(Strict):
    """Streamable HTTP transport settings."""

    host: str = Field("127.0.0.1", description="bind address; non-loopback requires a token")
    port: int = Field(8765, ge=1, le=65535)
    token: SecretStr | None = Field(None, description="bearer token, as ${ENV}")
    allowed_hosts: list[str] = Field(default_factory=list, max_length=64,
                                     description="extra Host names to accept (e.g. the machine's LAN name)")
    allowed_origins: list[str] = Field(default_factory=list, max_length=64,
                                       description="extra browser Origins allowed to call the server")
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024,
                                description="largest request body any route accepts")


class JudgeConfig(Strict):
    """The judge model ``reflectworld eval qa`` scores answers with (defaults: the QA model's endpoint)."""

    base_url: str | None = Field(None, description="OpenAI-compatible endpoint; null = qa.base_url")
    model: str = Field(description="judge model name")
    api_key: SecretStr | None = Field(None, description="use ${ENV}; null = qa.api_key")


class QAConfig(Strict):
    """The memory QA agent (``reflectworld ask``, the ``memory_ask`` tool): a tool-calling model."""

    base_url: str = Field(description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1")
    model: str = Field(description="chat model with tool calling (and vision, for key frames)")
    api_key: SecretStr = Field(SecretStr(""), description="use ${ENV} — never write the key itself")
    max_rounds: int = Field(6, ge=1, le=20, description="tool-calling rounds before it must answer")
    max_images: int = Field(2, ge=0, le=6, description="key frames shown to the model per evidence call")
    timeout_s: float = Field(60.0, gt=0, le=600)
    judge: JudgeConfig | None = Field(None, description="judge for `reflectworld eval qa`")


class SemanticConfig(Strict):
    """Semantic memory off the hot path: fact consolidation, chapters, per-camera context."""

    enabled: bool = Field(True, description="run the background semantic runner")
    consolidator: Literal["local", "llm"] = Field(
        "local", description="local = deterministic rules (no API key); llm = the `vlm` endpoint, local fallback")
    every_n: int = Field(5, ge=1, le=1000, description="consolidate an entity after every N new observations")
    gamma: float = Field(0.2, gt=0, le=1, description="re-confirmation gain: w ← w + (1 − w)·γ")
    initial_importance: float = Field(0.5, ge=0, le=1, description="importance of a new (non-identity) fact")
    chapter_budget: int = Field(5, ge=1, le=1000, description="B: closed events per chapter")
    chapter_interval_s: float = Field(3600.0, gt=0, description="write a chapter at least this often (media s)")
    event_gap_s: float = Field(60.0, gt=0, description="a gap longer than this between segments closes an event")
    context_min_traces: int = Field(20, ge=1, description="segments before a camera's context is first derived")
    context_revise_every: int = Field(50, ge=1, description="new segments between context revisions")
    timezone: str | None = Field(None, description="IANA zone for time-of-day habits; null = this machine's")
    queue_size: int = Field(256, ge=1, le=100_000, description="committed segments waiting; overflow is dropped")
    max_entities_per_run: int = Field(4, ge=1, le=100, description="consolidations per processed segment")


# ---------------------------------------------------------------------------------- rules + notifications


class WebhookChannelConfig(Strict):
    """A webhook receiver: JSON POST signed with HMAC-SHA256 (header X-ReflectWorld-Signature)."""

    url: str = Field(description="receiver URL, e.g. https://example.org/hooks/reflectworld")
    secret: SecretStr = Field(SecretStr(""), description="HMAC key, as ${ENV}; empty = unsigned")


class OpenClawChannelConfig(Strict):
    """The OpenClaw gateway hook (``POST {url}/hooks/agent`` with a bearer token)."""

    url: str = Field(description="gateway base URL, e.g. http://127.0.0.1:18789 (/hooks/agent is appended)")
    token: SecretStr = Field(description="the gateway's hooks.token, as ${ENV}")


class NtfyChannelConfig(Strict):
    """An ntfy-style topic URL (plain-text POST with Title/Priority/Tags headers)."""

    url: str = Field(description="topic URL, e.g. https://ntfy.sh/my-cameras")
    token: SecretStr | None = Field(None, description="access token, as ${ENV}; none = public topic")


class ChannelsConfig(Strict):
    """Out-of-band delivery channels (poll and the MCP resource need no configuration)."""

    webhook: WebhookChannelConfig | None = Field(None, description="none = no webhook")
    openclaw: OpenClawChannelConfig | None = Field(None, description="none = no OpenClaw hook")
    ntfy: NtfyChannelConfig | None = Field(None, description="none = no ntfy topic")
    mqtt: MqttChannelConfig | None = Field(None, description="none = no MQTT broker (Home Assistant, Frigate-style)")
    max_attempts: int = Field(5, ge=1, le=20, description="HTTP attempts per notification (retries on 429/5xx)")
    backoff_s: float = Field(0.5, gt=0, le=60, description="first retry delay; doubles each attempt")
    timeout_s: float = Field(10.0, gt=0, le=120, description="per-request timeout")


class QuietHoursConfig(Strict):
    """A daily local-time window (``start > end`` wraps past midnight)."""

    start: str = Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$", description="HH:MM, e.g. 22:00")
    end: str = Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$", description="HH:MM, e.g. 07:00")


class NotifyPolicyConfig(Strict):
    """How a camera's rule signals become notifications."""

    channels: list[Literal["poll", "webhook", "openclaw", "ntfy", "mqtt"]] = Field(
        default_factory=lambda: ["poll"], description="where sent notifications go (poll = notify_poll + resource)")
    min_severity: Literal["info", "warning", "critical"] = Field("info", description="suppress rules below this")
    quiet_hours: QuietHoursConfig | None = Field(None, description="suppress everything below critical")
    timezone: str | None = Field(None, description="IANA zone of quiet_hours; none = this machine's")
    event_gap_s: float = Field(60.0, ge=0, le=86400, description="matches closer than this are one event")
    attach_keyframe: bool = Field(True, description="attach the key frame (base64) to webhook payloads")
    proactive: bool = Field(True, description="proactive reminders from memory on this camera (false = muted)")


class NotificationsConfig(Strict):
    """Notification channels and the default per-camera policy."""

    channels: ChannelsConfig = Field(default_factory=ChannelsConfig)
    policy: NotifyPolicyConfig = Field(default_factory=NotifyPolicyConfig, description="default for every camera")
    cameras: dict[str, NotifyPolicyConfig] = Field(default_factory=dict, description="per-camera policy overrides")


class RuleConfig(Strict):
    """An initial rule (added at start-up; idempotent)."""

    text: str = Field(min_length=1, description="what to notice, in words (also shown to the VLM)")
    cameras: list[str] = Field(default_factory=list, description="camera ids; empty = every camera")
    conditions: dict[str, Any] = Field(
        default_factory=dict, description="local conditions: entities, objects, objects_mode, overlap, zone, "
        "time_window {start, end}, timezone, absent_minutes, unknown_people, said, text_read (see "
        "memory/procedural.py RuleConditions); empty = compile the text")
    severity: Literal["info", "warning", "critical"] = "info"
    cooldown_s: float = Field(300.0, ge=0, le=7 * 86400, description="minimum time between two deliveries")
    enabled: bool = True

    @field_validator("conditions")
    @classmethod
    def _check_conditions(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value:
            return value
        from memory.procedural import RuleConditions  # lazy: keeps `validate` light for manifests without

        try:
            return RuleConditions.model_validate(value).model_dump(exclude_defaults=True)
        except ValidationError as exc:
            detail = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"invalid rule conditions ({detail})") from None


class AccessConfig(Strict):
    """What tool calls may reach (sources in this manifest are trusted and not checked); see tools/access.py."""

    roots: list[str] | None = Field(None, max_length=64, description=(
        "folders whose files tool calls may read (capture_start, entity_update image_path/audio_path); "
        "null = your home directory and the ReflectWorld data directory"))
    hidden: bool = Field(False, description="allow hidden folders (.ssh, .config, …) below a root")
    url_schemes: list[Literal["rtsp", "rtsps", "http", "https"]] = Field(
        default_factory=lambda: ["rtsp", "rtsps", "http", "https"], description="stream URL schemes tool calls may use")
    lan: bool = Field(True, description=(
        "allow private LAN addresses (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7, fec0::/10)"))
    public: bool = Field(True, description="allow public internet addresses")
    loopback: bool = Field(False, description="allow this machine's own addresses (127.0.0.0/8, ::1)")
    networks: list[str] = Field(default_factory=list, max_length=64, description=(
        "extra networks to allow, as CIDR (link-local and cloud metadata stay refused)"))
    devices: bool = Field(True, description="allow local video devices (/dev/videoN)")
    max_timeout_s: float = Field(30.0, gt=0, le=300, description="cap on caller-chosen open/read timeouts")
    max_captures: int = Field(16, ge=1, le=256, description=(
        "captures that may run at once, however they start (tool calls, dashboard, phone page, manifest)"))

    @field_validator("networks")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        import ipaddress

        for net in value:
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError:
                raise ValueError(f"{net!r} is not a network; write CIDR like 192.168.1.0/24") from None
        return value


#: the tool groups a manifest can offer (``memory_ask`` comes with a `qa:` section)
TOOL_GROUPS = ("memory", "entities", "rules", "capture", "perception", "context")
#: offered when the manifest names none: the core a host needs (about 19.5k characters of definitions)
DEFAULT_TOOL_GROUPS = ("memory", "entities", "rules", "capture")
ToolGroup = Literal["memory", "entities", "rules", "capture", "perception", "context"]


class ServerConfig(Strict):
    """MCP server settings."""

    name: str = "reflectworld"
    http: HTTPConfig = Field(default_factory=HTTPConfig)
    max_results: int = Field(50, ge=1, le=500, description="cap on any list a tool returns")
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig, description="the web dashboard at / (HTTP)")
    tools: list[ToolGroup] = Field(
        default_factory=lambda: list(DEFAULT_TOOL_GROUPS), description="tool groups offered to hosts: memory, "
        "entities, rules (rules + notifications), capture, perception (perception_now, perception_steer), context "
        "(context_get, context_set); every tool definition costs a host tokens on every turn")


class Manifest(Strict):
    """Root of the manifest."""

    version: Literal[1] = Field(1, description="manifest format version")
    user_id: str = Field("default", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    timezone: str | None = Field(None, description="the user's IANA time zone (e.g. Europe/Berlin) for times in "
                                 "search questions ('yesterday at 3 pm'); null = this machine's")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "WARNING", description="stderr log level; `reflectworld -v` / `-vv` raise it to INFO / DEBUG")
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    perception: PerceptionConfig = Field(default_factory=PerceptionConfig)
    vlm: OpenAIVLMConfig | None = Field(None, description="none = the local describer")
    sources: list[SourceConfig] = Field(default_factory=list)
    server: ServerConfig = Field(default_factory=ServerConfig)
    access: AccessConfig = Field(default_factory=AccessConfig)
    notifications: NotificationsConfig = Field(default_factory=NotificationsConfig)
    rules: list[RuleConfig] = Field(default_factory=list, description="initial rules, added at start-up")
    semantic: SemanticConfig = Field(default_factory=SemanticConfig)
    qa: QAConfig | None = Field(None, description="QA agent model; none = memory_ask is unavailable")
    proactive: ProactiveConfig = Field(default_factory=ProactiveConfig,
                                       description="reminders spoken first, from memory, when what they concern is in view")

    def store_uri(self) -> str:
        """The store URI, with the default filled in and ``~`` expanded."""
        if self.memory.uri is None:
            return default_store_uri()
        if "://" in self.memory.uri:
            return self.memory.uri
        return str(Path(self.memory.uri).expanduser())

    def storage_options(self) -> dict[str, str] | None:
        """LanceDB ``storage_options`` for an object-store URI (``None`` for a local store)."""
        if "://" not in self.store_uri():
            return None
        return self.memory.storage.storage_options() or None


def default_store_uri() -> str:
    """The embedded store's default directory (``$REFLECTWORLD_DATA_DIR`` overrides it)."""
    base = os.environ.get("REFLECTWORLD_DATA_DIR") or user_data_dir("reflectworld", appauthor=False)
    return str(Path(base).expanduser() / "lancedb")


def default_manifest() -> Manifest:
    """The manifest used when none is given: embedded store, local models, no VLM."""
    return Manifest()


# ---------------------------------------------------------------------------------- loading


def _substitute_env(node: Any, path: str, problems: list[ManifestProblem]) -> Any:
    """Replace ``${VAR}`` / ``${VAR:default}`` in every string of ``node``."""
    if isinstance(node, dict):
        return {k: _substitute_env(v, f"{path}.{k}" if path else str(k), problems) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute_env(v, f"{path}[{i}]", problems) for i, v in enumerate(node)]
    if not isinstance(node, str):
        return node

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = os.environ.get(name)
        if value is not None:
            return value
        if default is not None:
            return default
        problems.append(
            ManifestProblem(
                path,
                f"environment variable {name} is not set",
                f"export {name}=… before starting, or write ${{{name}:default}} to give a default",
            )
        )
        return ""

    return _ENV_REF.sub(replace, node)


#: discriminator values pydantic inserts into error locations
_TAGS = {"minilm", "hash", "openai", "yunet", "none", "ssd", "yolo", "rapidocr", "whisper", "color", "onnx"}


def _loc_to_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in _TAGS and parts:
            continue  # discriminated-union tag pydantic inserts into the location
        else:
            parts.append(f".{item}" if parts else str(item))
    return "".join(parts)


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """Field names valid at the parent of ``loc`` (for 'did you mean' hints)."""
    candidates: list[Any] = [Manifest]
    for item in loc[:-1]:
        if isinstance(item, int):
            continue
        tagged = [c for c in candidates if "type" in c.model_fields and c.model_fields["type"].default == item]
        if tagged:  # a discriminated-union tag: pick the member it names
            candidates = tagged
            continue
        model = next((c for c in candidates if item in c.model_fields), None)
        if model is None:
            return []
        annotation = model.model_fields[item].annotation
        args = [annotation, *getattr(annotation, "__args__", ())]
        for arg in list(args):
            args.extend(getattr(arg, "__args__", ()))  # list[Model] and Optional[Model]
        candidates = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if not candidates:
            return []
    return list(candidates[0].model_fields) if candidates else []


def _problem_from_error(err: Any) -> ManifestProblem:
    loc = tuple(err["loc"])
    path = _loc_to_path(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc)
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        fix = f"did you mean '{close[0]}'?" if close else "remove it"
        if allowed:
            fix += f" (allowed here: {', '.join(allowed)})"
        return ManifestProblem(path, "unknown key", fix)
    if kind == "missing":
        return ManifestProblem(path, "required key is missing", "add it (see manifests/example.yaml)")
    if kind == "value_error":  # a cross-field check on a section model: its message names the keys and the fix
        message = str(err["msg"]).removeprefix("Value error, ")
        what, _, fix = message.partition("; ")
        return ManifestProblem(path, what, fix or "see manifests/example.yaml for the expected form")
    if kind == "union_tag_invalid":
        return ManifestProblem(path, err["msg"], "set `type:` to one of the listed values")
    value = err.get("input")
    shown = "" if isinstance(value, dict | list) else f" (got {value!r})"
    return ManifestProblem(path, f"{err['msg']}{shown}", "see manifests/example.yaml for the expected form")


def parse_manifest(data: Any, source: str = "<manifest>") -> Manifest:
    """Validate an already-parsed mapping; raises :class:`ManifestError` listing every problem."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ManifestError(source, [ManifestProblem("", "the manifest must be a mapping of keys")])
    problems: list[ManifestProblem] = literal_secrets(data)
    data = _substitute_env(data, "", problems)
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        problems.extend(_problem_from_error(e) for e in exc.errors())
        raise ManifestError(source, problems) from None
    if problems:
        raise ManifestError(source, problems)
    return manifest


def load_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Load and validate a YAML or TOML manifest file.

    Raises:
        ManifestError: the file is missing, unparsable or invalid; lists every problem.
    """
    file = Path(path)
    if not file.is_file():
        raise ManifestError(str(file), [ManifestProblem("", "file not found", "check the path")])
    if file.stat().st_size > MAX_MANIFEST_BYTES:
        raise ManifestError(str(file), [ManifestProblem("", f"the file is larger than {MAX_MANIFEST_BYTES} bytes",
                                                        "a manifest is a short configuration file; check the path")])
    try:
        text = file.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(str(file), [ManifestProblem(
            "", f"the file is not UTF-8 text (byte {exc.start} cannot be decoded)",
            "save it as UTF-8; a manifest is a short text file — check the path")]) from None
    try:
        if file.suffix.lower() == ".toml":
            data: Any = tomllib.loads(text)
        elif file.suffix.lower() in {".yaml", ".yml", ".json"}:
            data = load_yaml_bounded(text)
        else:
            raise ManifestError(
                str(file), [ManifestProblem("", f"unsupported extension {file.suffix!r}", "use .yaml, .yml or .toml")]
            )
        if nesting_depth(data) > MAX_DEPTH:
            raise YAMLLimitError(f"the manifest is nested more than {MAX_DEPTH} levels deep")
    except (YAMLLimitError, RecursionError) as exc:
        what = str(exc) if isinstance(exc, YAMLLimitError) else f"the manifest is nested more than {MAX_DEPTH} levels deep"
        raise ManifestError(str(file), [ManifestProblem("", what, "simplify the file")]) from None
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise ManifestError(str(file), [ManifestProblem("", f"cannot parse: {exc}", "fix the syntax")]) from None
    return parse_manifest(data, str(file))
