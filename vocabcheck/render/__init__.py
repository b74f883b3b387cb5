"""Rendering comparisons and profiles: terminal, JSON documents, Markdown, JUnit."""
