"""Chat templates rendered in a process of their own, bounded in time and memory (the parent, :func:`render_chats`,
and the child, :func:`main`).

A chat template is code from the model repository (Jinja, in transformers' immutable sandbox: it cannot reach files
or Python objects), but nothing bounds what it computes: nested loops of 10^10 iterations, ``'x' * 10**9``. vocabcheck
renders every prompt's conversation in one child process with an address-space limit
(``VOCABCHECK_TEMPLATE_MEMORY_BYTES``, 2 GiB) and a wall-clock limit (``VOCABCHECK_TEMPLATE_TIMEOUT_S``, 60 s); a
rendered prompt longer than ``VOCABCHECK_MAX_PROMPT_CHARS`` is refused by the child before it is sent back. Whatever
goes wrong is one line naming the template's file, exit code 2.

Protocol: the parent writes one JSON document to the child's stdin ({"template", "conversations", "specials",
"max_chars"}); the child answers one ({"rendered": [...]} or {"error": "..."}) on stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> int:
    """The child: render the job on stdin, answer on stdout."""
    job = json.loads(sys.stdin.read())
    try:
        from transformers.utils.chat_template_utils import render_jinja_template

        rendered, _ = render_jinja_template(conversations=job["conversations"], chat_template=job["template"],
                                            add_generation_prompt=True, **job["specials"])
        for index, text in enumerate(rendered):
            if len(text) > job["max_chars"]:
                raise ValueError(f"it renders prompt {index + 1} as {len(text):,} characters, more than "
                                 f"{job['max_chars']:,} (VOCABCHECK_MAX_PROMPT_CHARS sets another limit)")
    except MemoryError:
        answer = {"error": "it needs more memory than VOCABCHECK_TEMPLATE_MEMORY_BYTES allows"}
    except RecursionError:
        answer = {"error": "it recurses too deep"}
    except Exception as exc:  # noqa: BLE001 - jinja2 raises many types for a broken template
        answer = {"error": (str(exc).splitlines() or [type(exc).__name__])[0][:200]}
    else:
        answer = {"rendered": rendered}
    sys.stdout.write(json.dumps(answer))
    return 0


TEMPLATE_TIMEOUT_S = 60
TEMPLATE_TIMEOUT_ENV = "VOCABCHECK_TEMPLATE_TIMEOUT_S"
TEMPLATE_MEMORY_BYTES = 2 << 30
TEMPLATE_MEMORY_ENV = "VOCABCHECK_TEMPLATE_MEMORY_BYTES"


def render_chats(profile, conversations) -> list[str]:
    """Each conversation through the target's chat template (with the generation prompt), rendered in a child
    process bounded in time and memory."""
    import subprocess

    from ...errors import InputError
    from ...limits import MAX_PROMPT_CHARS, PROMPT_CHARS_ENV, cap_from_env

    if not profile.chat_template:
        raise InputError("--chat needs a chat template, and the target has none", profile.location)
    where = profile.provenance.get("chat_template", profile.location)
    specials = {f"{role}_token": token.content for role in ("bos", "eos", "pad", "unk")
                if (token := profile.specials.role(role)) is not None and token.content is not None}
    seconds = cap_from_env(TEMPLATE_TIMEOUT_ENV, TEMPLATE_TIMEOUT_S, "seconds")
    memory = cap_from_env(TEMPLATE_MEMORY_ENV, TEMPLATE_MEMORY_BYTES, "bytes")
    job = json.dumps({"template": profile.chat_template, "conversations": [list(c) for c in conversations],
                      "specials": specials,
                      "max_chars": cap_from_env(PROMPT_CHARS_ENV, MAX_PROMPT_CHARS, "characters")})

    def limit() -> None:  # in the child, before it runs anything
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    try:
        # this file run as a script: the child imports json and transformers' renderer, not vocabcheck (whose
        # package imports torch), and -P keeps the working directory and this one off its sys.path
        done = subprocess.run([sys.executable, "-P", str(Path(__file__).resolve())], input=job, capture_output=True,
                              text=True, timeout=seconds, preexec_fn=limit)
    except subprocess.TimeoutExpired as exc:
        raise InputError(f"the chat template did not finish rendering in {seconds} s; {TEMPLATE_TIMEOUT_ENV} sets "
                         "another limit", where) from exc
    try:
        answer = json.loads(done.stdout)
    except ValueError:  # the child died (out of memory in the interpreter itself, a signal)
        answer = {"error": f"it needs more memory than {TEMPLATE_MEMORY_ENV} ({memory:,} bytes) allows"
                  if "MemoryError" in done.stderr or done.returncode < 0 else
                  (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1][:200]}
    if "error" in answer:
        raise InputError(f"the chat template fails: {answer['error']}", where)
    return answer["rendered"]


if __name__ == "__main__":
    sys.exit(main())
