"""The lab's subcommands of the `infertune` CLI, registered through the `infertune.commands` entry
points (lab/pyproject.toml)."""
