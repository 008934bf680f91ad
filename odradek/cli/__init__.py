"""The `odradek` command."""
