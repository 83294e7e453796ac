"""Turning a layout into Kubernetes objects and applying them: pure `make_*` builders, the spec to
planner-request translation, and server-side apply."""
