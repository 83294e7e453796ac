"""Subcommands of the `infertune` CLI: each parses arguments, calls the layers below, and prints."""
