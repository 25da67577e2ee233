"""Bounds on reading a manifest, and the rule that secrets are never written into it.

* **Size**: a manifest file over ``MAX_MANIFEST_BYTES`` (1 MiB) is refused before parsing.
* **YAML aliases and depth**: an alias-heavy document (a "billion laughs") is small on disk but
  expands exponentially once walked. The YAML is composed into a node graph first; its *expanded*
  size (every alias counted as the subtree it stands for) and nesting depth are measured with a
  memo, and a document over ``MAX_NODES`` nodes or ``MAX_DEPTH`` levels is refused before any
  Python object is built.
* **Literal secrets**: ``api_key``, ``token``, ``secret`` and ``password`` values must be ``${ENV}``
  references (as the README promises), and so must the password of a URL's ``user:password@`` and
  the value of a secret-looking query parameter (``?token=``) in any string; a ``${ENV:default}``
  whose default is not empty writes the secret into the file after all. Each is a problem with a fix.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from plugin.errors import ManifestProblem

__all__ = ["MAX_DEPTH", "MAX_MANIFEST_BYTES", "MAX_NODES", "YAMLLimitError", "literal_secrets", "load_yaml_bounded",
           "nesting_depth"]

MAX_MANIFEST_BYTES = 1024 * 1024
MAX_NODES = 100_000
MAX_DEPTH = 64
SECRET_KEYS = frozenset({"api_key", "token", "secret", "password", "passwd",
                         # object-store credentials (memory.storage and its LanceDB options)
                         "secret_access_key", "session_token", "aws_secret_access_key", "aws_session_token"})
#: a whole value that is one environment reference, with at most an empty default (``${X}``, ``${X:}``)
_REFERENCE = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*:?\}$")
#: ``scheme://user:password@`` in a string (the password group)
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:([^/@\s]*)@")
#: ``?name=value`` / ``&name=value`` with a secret-looking name (the value group)
_URL_SECRET_PARAM = re.compile(r"[?&][^=&#\s]*(?:pass|pwd|token|secret|api_?key|auth|sig|credential)[^=&#\s]*=([^&#\s]*)",
                               re.IGNORECASE)


class YAMLLimitError(ValueError):
    """The YAML document is too large or too deeply nested once its aliases are expanded."""


def _measure(node: yaml.Node, memo: dict[int, tuple[int, int]], stack: set[int]) -> tuple[int, int]:
    """(expanded node count, depth) of ``node``; raises on a cycle or past the limits."""
    key = id(node)
    if key in memo:
        return memo[key]
    if key in stack:
        raise YAMLLimitError("the YAML refers to itself through an alias; remove the recursive anchor")
    stack.add(key)
    count, depth = 1, 1
    if isinstance(node, yaml.SequenceNode):
        children: list[yaml.Node] = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    else:
        children = []
    for child in children:
        c, d = _measure(child, memo, stack)
        count += c
        depth = max(depth, d + 1)
        if count > MAX_NODES:
            raise YAMLLimitError(f"the YAML expands to more than {MAX_NODES} values (aliases counted as copies); "
                                 "write the manifest without alias chains")
        if depth > MAX_DEPTH:
            raise YAMLLimitError(f"the YAML is nested more than {MAX_DEPTH} levels deep")
    stack.discard(key)
    memo[key] = (count, depth)
    return count, depth


def load_yaml_bounded(text: str) -> Any:
    """``yaml.safe_load(text)``, refusing documents past the node and depth limits.

    Raises:
        YAMLLimitError: too many values once aliases are expanded, too deep, or self-referential.
        yaml.YAMLError: the text is not valid YAML.
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _measure(node, {}, set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def literal_secrets(data: Any, path: str = "") -> list[ManifestProblem]:
    """Problems for every secret written as a literal value (see the module docstring)."""
    problems: list[ManifestProblem] = []
    if isinstance(data, dict):
        for key, value in data.items():
            here = f"{path}.{key}" if path else str(key)
            if key in SECRET_KEYS and isinstance(value, str) and value and not _REFERENCE.match(value.strip()):
                problems.append(_problem(here, "a secret is written into the manifest"))
            else:
                problems.extend(literal_secrets(value, here))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            problems.extend(literal_secrets(value, f"{path}[{i}]"))
    elif isinstance(data, str) and "://" in data:
        secrets = [m.group(1) for m in _URL_PASSWORD.finditer(data)] + \
            [m.group(1) for m in _URL_SECRET_PARAM.finditer(data)]
        if any(secret and not _REFERENCE.match(secret) for secret in secrets):
            problems.append(ManifestProblem(
                path, "a URL carries a password or token written into the manifest",
                "put it in an environment variable and write the URL as user:${VAR}@host or ?token=${VAR} "
                "(then export VAR=…)"))
    return problems


def _problem(here: str, what: str) -> ManifestProblem:
    var = re.sub(r"[^A-Z0-9]+", "_", here.upper()).strip("_") or "SECRET"
    return ManifestProblem(here, what, f"move it to an environment variable and write ${{{var}}} instead "
                           f"(then export {var}=…); a ${{VAR:default}} default is written into the file too")


def nesting_depth(data: Any) -> int:
    """How deeply ``data`` (parsed YAML/TOML) nests, counted without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            break
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return deepest
