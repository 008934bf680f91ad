"""Generates odradek/protocol/messages/, api_keys.py and errors.py from the vendored specs."""
