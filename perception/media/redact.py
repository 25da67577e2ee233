"""Credentials out of what is shown: URIs in logs, tool results and stored records.

:func:`redact_uri` removes ``user:password@`` from a URI and masks secret-looking query values;
:func:`redact_text` does the same to every URI inside a longer text (an error message, a log line).
:class:`RedactingFilter` applies :func:`redact_text` to every log record at every level; ``reflectworld``
installs it on the root handlers at start-up (:func:`install_log_redaction`).
"""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["RedactingFilter", "install_log_redaction", "redact_text", "redact_uri"]

_SECRET_PARAMS = re.compile(r"(pass|pwd|token|key|secret|auth|sig|credential|session|code)", re.IGNORECASE)
#: a URI inside free text: scheme://… up to whitespace or a quote
_URI = re.compile(r"""[A-Za-z][A-Za-z0-9+.-]{1,15}://[^\s'"<>`]+""")
#: userinfo in a URI that did not parse (``scheme://user:pw@host``)
_USERINFO = re.compile(r"(?<=://)[^/@\s'\"]+@")
#: ``name=value`` query parameters with secret names, anywhere in a text
_PARAM = re.compile(r"(?i)([?&;](?:[^=&\s'\"]*(?:pass|pwd|token|key|secret|auth|sig|credential|session)"
                    r"[^=&\s'\"]*)=)[^&\s'\"#]*[^&\s'\"#.,;:)\]]")


def redact_uri(uri: str) -> str:
    """``uri`` without credentials: user:password is removed and secret-looking query values masked.

    The result is what logs, tool results and stored records (the source key) show.
    """
    if "://" not in uri:
        return uri
    try:
        parts = urlsplit(uri)
    except ValueError:
        return _PARAM.sub(r"\1***", _USERINFO.sub("", uri))
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = parts.query
    if query:
        pairs = [(k, "***" if _SECRET_PARAMS.search(k) else v) for k, v in parse_qsl(query, keep_blank_values=True)]
        query = urlencode(pairs, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str) -> str:
    """``text`` with every URI in it redacted (:func:`redact_uri`)."""
    if "://" not in text and "=" not in text:
        return text
    out = _URI.sub(lambda m: _redact_embedded(m.group(0)), text)
    return _PARAM.sub(r"\1***", out)


def _redact_embedded(uri: str) -> str:
    tail = ""
    while uri and uri[-1] in ".,;:)]}":  # punctuation after a URI in a sentence
        tail, uri = uri[-1] + tail, uri[:-1]
    return redact_uri(uri) + tail


class RedactingFilter(logging.Filter):
    """Redacts credentials in a record's message and arguments (every level, every logger)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to the handler's own error path
            return True
        clean = redact_text(message)
        if clean != message or record.args:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Add a :class:`RedactingFilter` to every handler of ``logger`` (the root logger by default)."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
