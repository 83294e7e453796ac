"""The names the API server accepts for what the operator creates from a resource.

The operator gives its Deployment (or LeaderWorkerSet), its Service and its selector label the
resource's own name, so that name must be valid for the strictest of them: a Service name is an RFC
1035 label (a lower-case letter first, then lower-case letters, digits and '-', ending in a letter or
digit, at most 63 characters), which also makes it a valid object name and label value."""

from __future__ import annotations

import re

from infertune.api.formats import OBJECT_NAME, shown

_RFC1035 = "[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
_RFC1035_LABEL = re.compile(_RFC1035)
_RFC1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
NAME_MESSAGE = ("metadata.name names the Deployment and the Service the operator creates: lower-case letters, "
                "digits and '-', a letter first, a letter or digit last, at most 63 characters (an RFC 1035 label)")
# The same rule for the API server (a CRD's root may read metadata.name), so kubectl apply refuses
# what the operator could not serve; CEL's matches() is RE2, which reads this pattern as re does.
NAME_RULE = {"rule": f"self.metadata.name.matches('^{_RFC1035}$')", "message": NAME_MESSAGE}


def name_refusal(value: object) -> str | None:
    """Why `value` cannot name the objects the operator renders for a resource, or None if it can."""
    if isinstance(value, str) and _RFC1035_LABEL.fullmatch(value):
        return None
    return (f"metadata.name {shown(value, 70)} is not a name the operator can give the resource's Deployment and "
            "Service: lower-case letters, digits and '-', a letter first, a letter or digit last, at most 63 "
            "characters (a Service name is an RFC 1035 label)")


def is_namespace_name(value: object) -> bool:
    """An RFC 1123 label, as a namespace's name must be."""
    return isinstance(value, str) and _RFC1123_LABEL.fullmatch(value) is not None


def is_object_name(value: object) -> bool:
    """An RFC 1123 subdomain, as most objects' names (a Secret's, a Lease's) must be."""
    return isinstance(value, str) and OBJECT_NAME.refusal(value) is None


def namespace_refusal(value: object) -> str | None:
    """Why `value` cannot be a namespace's name, or None if it can."""
    if is_namespace_name(value):
        return None
    return (f"metadata.namespace {shown(value, 70)} is not a namespace name: lower-case letters, digits and '-', "
            "a letter or digit first and last, at most 63 characters (an RFC 1123 label)")
