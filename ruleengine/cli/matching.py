"""Matching commands: match, explain-rule."""
