"""The embedded demo: a Qwen2.5-shaped pair built offline from files that installed packages ship."""
