"""What each string of a resource or a policy may hold: the Kubernetes formats (object names, ConfigMap and
Secret keys, label keys and values, resource names and quantities, container image references) and the
free text that only a NUL ends.

Each `Format` is checked twice from one definition: its patterns go into the CRD (OpenAPI `pattern`, the
further ones under `allOf`, a map's keys through a CEL rule), and `refusal` gives the operator's message,
which names the first control character and its position, or the rule the string breaks. The patterns are
written in the syntax RE2 (the API server's) and Python's `re` read alike (no `\\s`, whose sets differ; RE2
searches a pattern within `^(?:...)$`, whose `$` is the end of the string, and re.fullmatch matches it
whole), so both refuse the same strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# C0 control characters and DEL: no name, key, label or reference holds one, and a NUL no string at all
# (execve(2) takes C strings; an argument or environment variable holding one is cut short or refused).
CONTROL = r"\x00-\x1f\x7f"
NUL = r"\x00"


def shown(value: object, limit: int = 40) -> str:
    """A value as a message quotes it: a number as written, anything else as its repr (control characters
    escaped, so the message stays one line), cut short past `limit` characters."""
    text = str(value) if isinstance(value, int | float) else repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}... ({len(str(value))} characters)"


@dataclass(frozen=True)
class Format:
    """A string format: what it is called, its rule in words, the pattern of the whole string (which holds
    none of the `forbidden` characters), and further patterns it must also match (lengths one pattern cannot
    count, such as a label key's prefix)."""

    what: str
    rule: str
    pattern: str
    limits: tuple[str, ...] = ()
    max_length: int | None = None
    forbidden: str = CONTROL
    carries: str = "hold"  # "which an environment variable cannot carry"

    def refusal(self, text: str, subject: str = "") -> str | None:
        """Why `text` is not of this format, in words that name the first forbidden character and its
        position, or the rule; None if it is. `subject` says which string, where the field holds several."""
        found = re.search(f"[{self.forbidden}]", text)
        lead = f"{subject} " if subject else ""
        if found is not None:
            char = found.group()
            which = "a NUL character" if char == "\x00" else f"the control character {char!r}"
            return f"{lead}holds {which} at {found.start()}, which {self.what} cannot {self.carries}"
        if self.max_length is not None and len(text) > self.max_length:
            return f"{lead}has {len(text)} characters; {self.what} has at most {self.max_length}"
        if not all(re.fullmatch(p, text) for p in (self.pattern, *self.limits)):
            return f"{subject or shown(text)} is not {self.what}: {self.rule}"
        return None

    @property
    def name(self) -> str:
        """What it is called, without the article: a CRD reference's validation column."""
        return self.what.split(" ", 1)[1]

    def schema(self) -> dict[str, Any]:
        """The OpenAPI keywords that hold a string to this format in the CRD."""
        out: dict[str, Any] = {"pattern": anchored(self.pattern)}
        if self.max_length is not None:
            out["maxLength"] = self.max_length
        if self.limits:
            out["allOf"] = [{"pattern": anchored(p)} for p in self.limits]
        return out

    def cel(self, variable: str) -> str:
        """A CEL expression true when `variable` is of this format, for what a pattern cannot reach (a map's
        keys). CEL string literals would need escaping for a backslash or a quote; these patterns hold neither."""
        checks = [f"{variable}.matches('{anchored(p)}')" for p in (self.pattern, *self.limits)]
        assert not any(c in p for p in (self.pattern, *self.limits) for c in "\\'"), self.what
        if self.max_length is not None:
            checks.insert(0, f"size({variable}) <= {self.max_length}")
        return " && ".join(checks)


def anchored(pattern: str) -> str:
    """The pattern of the whole string: RE2 and OpenAPI's `pattern` search, where re.fullmatch matches."""
    return f"^(?:{pattern})$"


_DNS_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = f"{_DNS_LABEL}([.]{_DNS_LABEL})*"
_NAME = "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"  # a qualified name's name part, at most 63
_NAME_RULE = "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
_KEY_RULE = f"an optional DNS subdomain prefix of at most 253 characters and '/', then {_NAME_RULE}"

# An object's name (a ConfigMap's, a Secret's, a ServingPolicy's): an RFC 1123 subdomain.
OBJECT_NAME = Format(
    "a DNS subdomain",
    "lower-case letters, digits, '-' and '.', each part between dots starting and ending with a letter or "
    "digit, at most 253 characters (the name of a Kubernetes object)",
    _DNS_SUBDOMAIN, max_length=253)
# A key of a ConfigMap's or a Secret's data (Kubernetes' IsConfigMapKey).
DATA_KEY = Format(
    "a ConfigMap or Secret key",
    "letters, digits, '-', '_' and '.', at most 253 characters, not '.' and not starting with '..'",
    "[-_a-zA-Z0-9][-._a-zA-Z0-9]{0,252}|[.][-_a-zA-Z0-9][-._a-zA-Z0-9]{0,251}")
# A label key (a qualified name); the prefix's length is the limit the pattern cannot count.
LABEL_KEY = Format("a label key", _KEY_RULE, f"({_DNS_SUBDOMAIN}/)?{_NAME}", limits=("([^/]{0,253}/)?[^/]*",),
                   max_length=253 + 1 + 63)
LABEL_VALUE = Format("a label value", f"empty, or {_NAME_RULE}", f"({_NAME})?", max_length=63)
# A toleration's key: a label key, or empty (with operator Exists: every taint).
TAINT_KEY = Format("a taint key", f"empty, or {_KEY_RULE}", f"({LABEL_KEY.pattern})?", LABEL_KEY.limits,
                   LABEL_KEY.max_length)
# A container's resource name (cpu, memory, hugepages-2Mi, example.com/rdma): a qualified name too.
RESOURCE_NAME = Format("a resource name", _KEY_RULE, LABEL_KEY.pattern, LABEL_KEY.limits, LABEL_KEY.max_length)
# A resource quantity as Kubernetes parses it, never negative (a container's request or limit cannot be).
_DECIMAL = r"([0-9]+(\.[0-9]*)?|\.[0-9]+)"
QUANTITY = Format(
    "a quantity",
    "a non-negative number with an optional suffix (Ki, Mi, Gi, Ti, Pi, Ei; m, k, M, G, T, P, E; or an "
    "exponent such as e3), e.g. '16', '500m', '256Gi'",
    rf"\+?{_DECIMAL}([KMGTPE]i|[numkMGTPE]|[eE][-+]?{_DECIMAL})?", max_length=64)

# A container image reference, as the container runtime parses it (the distribution/reference grammar):
# [registry[:port]/]repository[:tag][@digest], the repository in lower case, its name at most 255 characters.
_PATH_COMPONENT = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = "[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?"
_REGISTRY = rf"({_DOMAIN_COMPONENT}(\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(:[0-9]+)?"
_TAG = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = "[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE = Format(
    "an image reference",
    "[registry[:port]/]repository[:tag][@digest]: the repository in lower-case letters and digits, parts "
    "joined by '/', '.', '_', '__' or dashes; the tag at most 128 letters, digits, '_', '.' or '-'; the "
    "digest algorithm:hex; the name before the tag at most 255 characters",
    rf"({_REGISTRY}/)?{_PATH_COMPONENT}(/{_PATH_COMPONENT})*(:{_TAG})?(@{_DIGEST})?",
    limits=(f"[^@]{{0,255}}(:{_TAG})?(@.*)?",), max_length=1024)

# An environment variable's name as Kubernetes takes it (RelaxedEnvironmentVariableValidation): printable
# ASCII but '='. The bound keeps what the API server's CEL rule on spec.engine.env costs within its budget.
ENV_NAME = Format("an environment variable's name", "printable ASCII characters other than '='",
                  "[ -<>-~]+", max_length=1024, carries="carry")
# Free text the engine receives as an argument or the value of a variable: anything but a NUL. A value's
# bound, like a name's, keeps the CEL rule that refuses a NUL in spec.engine.env within the API server's
# estimated cost (128 variables of unbounded strings would be estimated at megabytes each).
TEXT = f"[^{NUL}]*"
ARGUMENT = Format("a command-line argument", "no NUL", TEXT, forbidden=NUL, carries="carry")
ENV_VALUE = Format("an environment variable", "no NUL", TEXT, max_length=32768, forbidden=NUL, carries="carry")
DESCRIPTION = Format("a description", "no NUL", TEXT, forbidden=NUL)
# A name the catalogs look up (a GPU, a model profile): one line, no control character.
CATALOG_NAME = Format("a catalog name", "no control character", f"[^{CONTROL}]*", max_length=253)
# A base URL a tenant may name (spec.metrics.prometheus.url): http(s), a host, an optional path; no userinfo,
# query or fragment, so nothing written here can become part of a query (observe/http.py parses it again
# before any use). Printable ASCII, as a URL is (other scripts are written percent-encoded or in IDNA's xn--
# form), and no space, spelled out: `\s` is ASCII's whitespace to RE2 and Unicode's to Python.
PROMETHEUS_URL = Format(
    "a Prometheus URL",
    "http(s)://host[:port][/path] in printable ASCII, with no space, user, query ('?') or fragment ('#')",
    rf"https?://[^/?#@ {CONTROL}]+(/[^?# {CONTROL}]*)?", limits=("[ -~]*",), max_length=2048)

# The formats whose pattern a CRD field carries, for the CRD reference to name it (TEXT's fields are named
# by what they refuse; a map's keys and an environment variable's name are checked by CEL rules).
FORMATS = (OBJECT_NAME, DATA_KEY, LABEL_VALUE, TAINT_KEY, QUANTITY, IMAGE, CATALOG_NAME, PROMETHEUS_URL)
