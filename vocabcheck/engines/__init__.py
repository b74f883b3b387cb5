"""The engines that run a pair, behind one seam, and the command lines of the engines users serve with.

An engine session has the interface of vocabcheck's own :class:`~vocabcheck.decode.session.Session`:
``generate(prompts, options, *, chat, batch_size, on_tokens) -> RunResult`` and the attributes the views read
(``target_profile``, ``draft_profile``, ``comparison``, ``device``, ``dtype``, ``engine``, ``engine_version``).
Every engine takes the pair's verdict and alignment from :mod:`vocabcheck.verdict`; none re-derives compatibility.

- ``vocabcheck``: its own decoder (:mod:`vocabcheck.decode`), the default;
- ``vllm``: vLLM (:mod:`vocabcheck.engines.vllm`: what maps to what; :mod:`~vocabcheck.engines.vllm_session`: the
  run; :mod:`~vocabcheck.engines.vllm_worker`: one engine in a process of its own), an optional dependency.

:mod:`vocabcheck.engines.commands` builds the ``vllm serve`` and SGLang command lines ``align`` prints. SGLang would
follow as one more module here with an ``open_session``.
"""

from __future__ import annotations

from collections.abc import Callable

ENGINES = ("vocabcheck", "vllm")
DEFAULT_ENGINE = "vocabcheck"


def open_session(engine: str, request, *, debug: bool = False, on_refusal=None, on_warning=None,
                 progress: Callable[[str], None] | None = None):
    """A session of ``engine`` for ``request`` (a :class:`~vocabcheck.decode.session.RunRequest`): the pair
    compared and an incompatible one refused, then the models loaded (vocabcheck) or the engine prepared (vLLM)."""
    if engine == "vllm":
        from . import vllm_session

        return vllm_session.open_session(request, debug=debug, on_refusal=on_refusal, on_warning=on_warning,
                                 progress=progress)
    if engine != DEFAULT_ENGINE:
        from ..errors import VocabcheckError

        raise VocabcheckError(f"--engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    from ..decode.session import start_session

    return start_session(request, on_refusal=on_refusal, on_warning=on_warning)
