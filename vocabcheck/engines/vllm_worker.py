"""One vLLM engine in a process of its own, driven over stdin/stdout by ``bench --compare-vllm``.

vLLM's engine holds process-wide state: a second engine in the same process fails to start (vLLM 0.32 on the CPU:
``'_lib_fn_wrapper' object has no attribute 'get'``). A bench needs one engine per (method, k, batch size), so each
runs here, in a child that the bench keeps between its paired repeats.

Protocol (one JSON document per line): the parent writes the job (target, draft directory, decode options, batch
size, prompt ids); the child starts the engine and answers ``{"ready": true}``. Then each line ``{"tokens": N}``
runs every prompt for N new tokens and is answered with the call's figures and token ids; ``{"quit": true}`` (or end
of input) ends it. A failure is answered ``{"error": "<one line>"}`` and the child exits.
"""

from __future__ import annotations

import json
import sys
from ..methods import Method


def _answer(document) -> None:
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()


def main() -> int:
    from dataclasses import replace

    from ..decode import DecodeOptions, Sampling
    from ..decode.load.loading import Prompt
    from ..decode.session import RunRequest
    from . import vllm_session

    job = json.loads(sys.stdin.readline())
    sampling = Sampling(**job["sampling"])
    options = DecodeOptions(method=job["method"], k=job["k"] if Method(job["method"]).proposes else "auto", max_new_tokens=8, seed=job["seed"],
                            ngram_min=job["ngram_min"], ngram_max=job["ngram_max"], sampling=sampling,
                            ignore_eos=True)
    try:
        session = vllm_session.open_session(RunRequest(target=job["target"], draft=job["draft"],
                                               methods=(job["method"],), device=job["device"], dtype=job["dtype"]))
        prompts = [list(p) for p in job["prompts"]]
        texts = [Prompt(None)] * len(prompts)
        session.generate_ids_batches(texts, prompts, options, batch_size=job["batch_size"])  # starts the engine
    except Exception as exc:  # noqa: BLE001 - the parent shows it as the cell's one line
        _answer({"error": (str(exc).splitlines() or [type(exc).__name__])[0]})
        return 1
    _answer({"ready": True, "version": session.engine_version, "device": session.device})
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            break
        result = session.generate_ids_batches(texts, prompts, replace(options, max_new_tokens=request["tokens"]),
                                              batch_size=job["batch_size"])
        metrics = result.metrics
        _answer({"tpot_ms": metrics.tpot_ms, "tokens_per_s": metrics.tokens_per_s,
                 "mean_accepted_length": metrics.mean_accepted_length, "drafted": metrics.drafted,
                 "accepted": metrics.accepted, "token_ids": [list(s.token_ids) for s in result.sequences]})
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
