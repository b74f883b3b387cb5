"""One vLLM engine in a process of its own, driven over stdin/stdout by ``bench --compare-vllm`` and ``predict
--engine vllm``: the child (:func:`main`) and the parent's handle on it (:class:`EngineProcess`).

vLLM's engine holds process-wide state: a second engine in the same process fails to start (vLLM 0.32 on the CPU:
``'_lib_fn_wrapper' object has no attribute 'get'``). A bench needs one engine per (method, k, batch size), and
predict one per (method, k), so each runs here, in a child kept while its calls run.

Protocol (one JSON document per line): the parent writes the job (target, draft directory, decode options, batch
size, prompt ids); the child starts the engine and answers ``{"ready": true}``. Then each line ``{"tokens": N}``
runs every prompt for N new tokens, in batches of the job's batch size or of the request's ``"batch_size"``
(the prompts cycled to fill the last batch, as bench does), and is answered with the call's figures and token ids;
``{"steps": N, "batch_size": B}`` runs the first B prompts (cycled) for N new tokens and is answered with each
decode step's time, rows and drafted proposals; ``{"quit": true}`` (or end of input) ends it. The job's
``batch_size`` is the most rows the engine schedules (``max_num_seqs``), and its ``schedule`` a served table's
``num_speculative_tokens_per_batch_size``. A failure is answered ``{"error": "<one line>"}`` and the child exits.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from ..methods import Method


def job(target: str, draft: str | None, method, k: int, options, batch_size: int, device: str, dtype: str,
        prompts, schedule=None) -> dict[str, Any]:
    """The job line that starts an engine: the pair (``draft`` None for n-gram lookup and plain decoding), the method
    and k (0 where it proposes nothing; a served table's largest k), the decode options' seed, n-gram bounds and
    sampling, the most rows it schedules, the prompt ids, and a served table's (start, end, k) ranges (``schedule``:
    vLLM's ``num_speculative_tokens_per_batch_size``)."""
    sampling = options.sampling
    return {"target": target, "draft": draft, "method": method, "k": k if Method(method).proposes else 0,
            "schedule": [list(r) for r in schedule] if schedule else None,
            "seed": options.seed, "ngram_min": options.ngram_min, "ngram_max": options.ngram_max,
            "batch_size": batch_size, "device": device, "dtype": dtype, "prompts": [list(p) for p in prompts],
            "sampling": {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p}}


def _answer(document) -> None:
    """One answer line, with this process's CPU seconds so far (``cpu_s``: the parent's load is not other processes'
    load)."""
    times = os.times()
    sys.stdout.write(json.dumps({**document, "cpu_s": times.user + times.system}) + "\n")
    sys.stdout.flush()


def main() -> int:
    from dataclasses import replace

    from ..decode import DecodeOptions, Sampling
    from ..bench.run import _batches as batches_of
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
        session.schedule = tuple(tuple(r) for r in job["schedule"]) if job.get("schedule") else None
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
        if "steps" in request:
            size = int(request["batch_size"])
            chosen = [prompts[i % len(prompts)] for i in range(size)]
            timed = replace(options, max_new_tokens=int(request["steps"]))
            # the engine the job started (its max_num_seqs the job's batch size), running fewer rows
            steps = vllm_session.timed_steps(session.engine_for(timed, job["batch_size"], prompts), chosen,
                                             vllm_session.sampling_params(timed, session.eos_ids, timed.max_new_tokens),
                                             count_drafts=Method(job["method"]) is Method.NGRAM)
            _answer({"steps": [list(step) for step in steps]})
            continue
        size = int(request.get("batch_size") or job["batch_size"])
        ids = [row for batch in batches_of(prompts, size) for row in batch]  # cycled to fill the last batch
        result = session.generate_ids_batches([Prompt(None)] * len(ids), ids,
                                              replace(options, max_new_tokens=request["tokens"]), batch_size=size,
                                              max_num_seqs=job["batch_size"])
        metrics = result.metrics
        _answer({"tpot_ms": metrics.tpot_ms, "tokens_per_s": metrics.tokens_per_s,
                 "mean_accepted_length": metrics.mean_accepted_length, "drafted": metrics.drafted,
                 "accepted": metrics.accepted, "token_ids": [list(s.token_ids) for s in result.sequences]})
    session.close()
    return 0


class EngineProcess:
    """One vLLM engine in its own process (:mod:`vocabcheck.engines.vllm_worker`), kept while its cell's repeats
    run; its log goes to a file, shown (last line) only if it fails."""

    def __init__(self, job: dict[str, Any]):
        import subprocess
        import tempfile

        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen([sys.executable, "-m", "vocabcheck.engines.vllm_worker"], text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        self.cpu_s = 0.0  # the engine process's CPU seconds, as its latest answer said
        self.ready = self._ask(job)  # answered once the engine has started and run every prompt once

    def _ask(self, document: dict[str, Any]) -> dict[str, Any]:
        from ..errors import VocabcheckError

        self.process.stdin.write(json.dumps(document) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        answer = json.loads(line) if line.strip() else {"error": self._last_log_line()}
        if "error" in answer:
            self.close()
            raise VocabcheckError(f"vLLM: {answer['error']}")
        self.cpu_s = float(answer.get("cpu_s", self.cpu_s))
        return answer

    def _last_log_line(self) -> str:
        self.process.wait(timeout=60)
        self.log.seek(0)
        lines = [line.strip() for line in self.log.read().splitlines() if line.strip()]
        return lines[-1] if lines else f"the vLLM process ended (exit code {self.process.returncode})"

    def run(self, tokens: int, batch_size: int | None = None) -> dict[str, Any]:
        """Every prompt for ``tokens`` new tokens, in batches of ``batch_size`` (the job's by default)."""
        return self._ask({"tokens": tokens, "batch_size": batch_size})

    def steps(self, batch_size: int, tokens: int) -> list[tuple[float, int, int | None]]:
        """The engine's decode steps over the job's first ``batch_size`` prompts (cycled where fewer), ``tokens`` new
        tokens each: (seconds, rows, proposals drafted or None: the engine's k) per step
        (:func:`vocabcheck.engines.vllm_session.timed_steps`)."""
        answer = self._ask({"steps": tokens, "batch_size": batch_size})
        return [(float(s), int(live), None if drafted is None else int(drafted))
                for s, live, drafted in answer["steps"]]

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.write('{"quit": true}\n')
                self.process.stdin.flush()
                self.process.wait(timeout=120)
            except (OSError, ValueError):
                pass
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        self.log.close()


if __name__ == "__main__":
    sys.exit(main())
