"""The behavioural probe: both tokenizers encode one built-in corpus, and every difference is counted.

Equal vocabularies can still split text differently (another normalizer, pre-tokenizer or merge order); the probe
measures how often that happens on text that looks like what people generate: prose in several scripts, code,
markup, numbers, emoji and odd whitespace.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from .errors import InputError

CORPUS: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "Speculative decoding lets a small draft model propose tokens that a large target model verifies.",
    "It's 3:45 p.m.; we'll ship v2.10.3 on 2026-12-02 — or won't we?",
    "Der Zug fährt um 7 Uhr ab. Größe, Straße, Übermaß.",
    "Le café coûte 3,50 € ; naïve façade, cœur, Noël.",
    "¿Dónde está la biblioteca? ¡Increíble! Año, niño, corazón.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από το τεμπέλικο σκυλί.",
    "中文分词测试：我们今天去北京大学图书馆看书。",
    "日本語のテキスト：こんにちは、世界！カタカナとひらがな、漢字。",
    "한국어 문장입니다. 안녕하세요, 세계!",
    "नमस्ते दुनिया, यह एक परीक्षण वाक्य है।",
    "مرحبا بالعالم، هذه جملة اختبار باللغة العربية.",
    "שלום עולם, זה משפט בדיקה.",
    "สวัสดีชาวโลก นี่คือประโยคทดสอบ",
    "Xin chào thế giới, đây là câu kiểm tra tiếng Việt.",
    "Emoji: 🤖🚀✨ 👩‍💻 👨‍👩‍👧‍👦 🇫🇷 🏳️‍🌈 ❤️ 1️⃣ 🫠",
    "Math: ∀x∈ℝ, x² ≥ 0; ∑ᵢ aᵢ = π ≈ 3.14159; α→β ⇒ γ.",
    "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "const x = await fetch(`/api/v1/items?id=${id}`).then(r => r.json());",
    "SELECT name, COUNT(*) AS n FROM users WHERE age >= 18 GROUP BY name ORDER BY n DESC;",
    "<div class=\"card\"><a href=\"https://example.com/?q=1&amp;r=2\">Link</a></div>",
    '{"key": [1, 2.5, -3e10, true, null], "nested": {"a": "b\\n"}}',
    "#!/usr/bin/env bash\nset -euo pipefail\necho \"$HOME\" | tr '[:lower:]' '[:upper:]'\n",
    "    indented    with    many     spaces\t\ttabs\t and trailing   ",
    "\n\n\nleading newlines\r\nwindows line\rold mac\n\n",
    "   ",
    "1234567890 12,345,678.90 0x1F 0b1010 1e-9 3.14159265358979",
    "Hello<|endoftext|>world <s> </s> [INST] [/INST] <|im_start|>user",
    "ＡＢＣ ｆｕｌｌｗｉｄｔｈ ﬁ ﬂ ① ㎏ Å Å",
    "e\u0301 vs \u00e9, zero\u200bwidth, non\u00a0breaking, soft\u00adhyphen",
    "ASCII art: ¯\\_(ツ)_/¯ (╯°□°)╯︵ ┻━┻",
    "URL https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/blob/main/tokenizer.json?download=true",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "MiXeD CaSe WORDS and camelCaseIdentifiers with snake_case_names",
    "Ὀδυσσεύς, ᾅδης — polytonic Greek; Ærøskøbing; Ðæþ.",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 𝒮𝒸𝓇𝒾𝓅𝓉 and surrogate-range 𠜎𠜱𠝹𠱓",
)


@dataclass(frozen=True)
class ProbeResult:
    texts: int
    differing: int
    first_index: int | None
    first_text: str | None
    target_ids: tuple[int, ...] = ()
    draft_ids: tuple[int, ...] = ()
    target_tokens: tuple[str, ...] = ()
    draft_tokens: tuple[str, ...] = ()


# Every text a tokenizer encodes and decodes before it is used: the corpus, and edge cases that make some files fail
# (control bytes, the last code point and a private-use one, long runs that exhaust a regex's backtracking).
SMOKE_TEXTS: tuple[str, ...] = CORPUS + ("", " ", "\x00\x01\x7f", "\U0010fffd\ue000", "a" * 64 + "b", "1" * 64,
                                         "<|endoftext|>")

# One text's encoding: its ids and its token strings.
Encoded = tuple[tuple[tuple[int, ...], tuple[str, ...]], ...]


def encode_corpus(tokenizer, corpus: tuple[str, ...] = CORPUS) -> Encoded:
    """``corpus`` encoded by a `tokenizers.Tokenizer` (no special tokens added), each encoding bounded
    (:func:`bounded_encodings`)."""
    encodings = bounded_encodings(tokenizer, corpus, add_special_tokens=False)
    return tuple((tuple(e.ids), tuple(e.tokens)) for e in encodings)


# What one probe text may encode to: a tokenizer whose normalizer prepends a million characters (or a post-processor
# that adds as many tokens) would make every text that long. Real tokenizers give a few tokens per character at most
# (byte fallback: 4), plus the special tokens around a sequence.
TOKENS_PER_CHARACTER = 16
TOKENS_PER_TEXT = 256


class EncodingTooLarge(InputError):
    """A probe text encodes to more tokens than :func:`bounded_encodings` allows (the source adds the file)."""


def bounded_encodings(tokenizer, texts: Sequence[str], *, add_special_tokens: bool) -> list:
    """``texts`` encoded one by one, the shortest first, each checked against ``TOKENS_PER_CHARACTER`` × its length
    + ``TOKENS_PER_TEXT`` as soon as it is made: a tokenizer that inflates text costs one short text's encoding, not
    the corpus's."""
    found: list = [None] * len(texts)
    for i in sorted(range(len(texts)), key=lambda k: len(texts[k])):
        encoding = tokenizer.encode(texts[i], add_special_tokens=add_special_tokens)
        limit = TOKENS_PER_CHARACTER * len(texts[i]) + TOKENS_PER_TEXT
        if len(encoding.ids) > limit:
            raise EncodingTooLarge(f"the tokenizer encodes a {len(texts[i]):,}-character probe text "
                                   f"{texts[i][:20]!r} to {len(encoding.ids):,} tokens, more than the {limit:,} the "
                                   f"probe allows ({TOKENS_PER_CHARACTER} a character and {TOKENS_PER_TEXT} a text)")
        found[i] = encoding
    return found


def run_probe(targets: Encoded, drafts: Encoded, corpus: tuple[str, ...] = CORPUS) -> ProbeResult:
    """Compare the two tokenizers' encodings of ``corpus`` (from :func:`corpus_encoding`)."""
    differing = [i for i, (a, b) in enumerate(zip(targets, drafts)) if a[0] != b[0]]
    if not differing:
        return ProbeResult(texts=len(corpus), differing=0, first_index=None, first_text=None)
    first = differing[0]
    return ProbeResult(
        texts=len(corpus),
        differing=len(differing),
        first_index=first,
        first_text=corpus[first],
        target_ids=targets[first][0],
        draft_ids=drafts[first][0],
        target_tokens=targets[first][1],
        draft_tokens=drafts[first][1],
    )


# --- the corpus encoded in another process ----------------------------------------------------------------------
#
# Building a 150k-250k-token tokenizer costs 0.4-0.7 s of one core, and `compare` spends longer than that reading the
# two tokenizer.json files into profiles. A second Python process builds the tokenizer, runs the smoke texts and
# encodes the corpus while the profiles are read: the second core does the work. (A thread does not help: the two
# jobs slow each other down in one process, reports/compare-overlap.md.) Only a clean result is used; on any failure
# (the file does not load or encode, the worker cannot start or dies) the source builds its tokenizer in-process as
# before, which refuses a bad file with its usual one-line error. A small tokenizer builds faster than a worker
# starts (a Python process importing `tokenizers` costs ~0.1 s): it stays in-process.

WORKER_MIN_CHARS = 2_000_000  # ~40 ms of building in-process

WORKER_DEADLINE = 300  # seconds; VOCABCHECK_PROBE_WORKER_TIMEOUT sets another
WORKER_DEADLINE_ENV = "VOCABCHECK_PROBE_WORKER_TIMEOUT"
WORKER_OUTPUT_BYTES = 64 * 1024 * 1024  # far above what bounded encodings of the corpus print

# The worker dies with the process that started it: the kernel sends it SIGKILL when its parent ends (Linux's
# PR_SET_PDEATHSIG, by ctypes); if the parent ended before that was set, it stops at once.
_DIES_WITH_PARENT = """
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)
"""

_JOB = """
import json
head, _, body = sys.stdin.buffer.read().partition(b"\\n")
job = json.loads(head)
from tokenizers import Tokenizer
tokenizer = Tokenizer.from_str(body.decode("utf-8"))
tokenizer.no_padding()
tokenizer.no_truncation()
def bounded(texts, add_special_tokens):
    found = [None] * len(texts)
    for i in sorted(range(len(texts)), key=lambda k: len(texts[k])):
        found[i] = tokenizer.encode(texts[i], add_special_tokens=add_special_tokens)
        if len(found[i].ids) > job["per_character"] * len(texts[i]) + job["per_text"]:
            sys.exit(2)
    return found
for encoding in bounded(job["smoke"], True):
    tokenizer.decode(encoding.ids, skip_special_tokens=True)
encodings = bounded(job["corpus"], False)
sys.stdout.write(json.dumps([[e.ids, e.tokens] for e in encodings]))
"""

_WORKER = _DIES_WITH_PARENT + _JOB


class _CorpusJob:
    """A worker process encoding the corpus with one tokenizer JSON text."""

    def __init__(self, tokenizer_json: str) -> None:
        import subprocess
        import threading

        head = json.dumps({"smoke": SMOKE_TEXTS, "corpus": CORPUS, "per_character": TOKENS_PER_CHARACTER,
                           "per_text": TOKENS_PER_TEXT}).encode("ascii")
        payload = head + b"\n" + tokenizer_json.encode("utf-8")  # a lone surrogate raises: no job, the caller builds
        self._output: bytes | None = None
        self._process = subprocess.Popen([sys.executable, "-P", "-c", _WORKER, str(os.getpid())],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._talk = threading.Thread(target=self._communicate, args=(payload,), daemon=True)
        self._talk.start()

    def _communicate(self, payload: bytes) -> None:
        """Send the job, then read at most WORKER_OUTPUT_BYTES of the answer (more is a failure)."""
        process = self._process
        try:
            try:
                process.stdin.write(payload)  # type: ignore[union-attr]
            finally:
                process.stdin.close()  # type: ignore[union-attr]
            output = process.stdout.read(WORKER_OUTPUT_BYTES + 1)  # type: ignore[union-attr]
        except (OSError, ValueError):  # the worker died while reading its input, or was killed
            return
        if len(output) > WORKER_OUTPUT_BYTES:
            process.kill()
        elif process.wait() == 0:
            self._output = output

    def result(self) -> Encoded | None:
        """The encodings, or None where the worker failed or did not finish within its deadline (then it is
        stopped)."""
        from .limits import cap_from_env

        self._talk.join(cap_from_env(WORKER_DEADLINE_ENV, WORKER_DEADLINE, "seconds"))
        if self._talk.is_alive():
            self.close()
        if self._output is None:
            return None
        try:
            found = json.loads(self._output)
            encoded = tuple((tuple(ids), tuple(tokens)) for ids, tokens in found)
        except (ValueError, TypeError):
            return None
        return encoded if len(encoded) == len(CORPUS) else None

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
        self._talk.join()
        self._process.wait()


class Background:
    """The worker processes of one :func:`corpus_in_background` block, by source."""

    def __init__(self) -> None:
        self._jobs: dict[int, tuple[object, _CorpusJob]] = {}
        self._checks: dict[int, Callable[[], None]] = {}

    def covers(self, source) -> bool:
        """Whether a worker builds ``source``'s tokenizer (and so checks that the library can build it)."""
        return id(source) in self._jobs

    def check_on_failure(self, source, check: Callable[[], None]) -> None:
        """Run ``check`` (which raises the precise InputError for a bad file) if the worker for ``source`` fails,
        before the tokenizer is built in this process: at :func:`corpus_encoding`, or when the block ends."""
        self._checks[id(source)] = check

    def _start(self, source) -> None:
        try:
            job = _CorpusJob(source.tokenizer_json)
        except (OSError, UnicodeEncodeError):
            return
        self._jobs[id(source)] = (source, job)
        _ACTIVE[id(source)] = self

    def _result(self, source) -> Encoded | None:
        found = self._jobs[id(source)][1].result()
        if found is None:
            check = self._checks.pop(id(source), None)
            if check is not None:
                check()
        else:
            self._checks.pop(id(source), None)
        return found

    def _settle(self) -> None:
        for source, _ in list(self._jobs.values()):
            if id(source) in self._checks:
                self._result(source)

    def _close(self) -> None:
        for key, (_, job) in self._jobs.items():
            _ACTIVE.pop(key, None)
            job.close()


_ACTIVE: dict[int, Background] = {}


@contextmanager
def corpus_in_background(sources: Sequence) -> Iterator[Background]:
    """Inside this block, :func:`corpus_encoding` of each of ``sources`` (:class:`~vocabcheck.sources.base.ModelSource`)
    comes from a worker process started here (for large tokenizer files). When the block ends normally, the checks
    registered with :meth:`Background.check_on_failure` run for every worker that failed; every worker is stopped."""
    background = Background()
    try:
        for source in sources:
            if id(source) not in _ACTIVE and sys.executable and len(source.tokenizer_json) >= WORKER_MIN_CHARS:
                background._start(source)
        yield background
        background._settle()
    finally:
        background._close()


def corpus_encoding(source) -> Encoded:
    """The corpus encoded by ``source``'s tokenizer: from its worker process where one ran cleanly, otherwise with
    ``source.tokenizer`` (built in this process, and checked: a bad file raises its InputError here)."""
    background = _ACTIVE.get(id(source))  # set while its Background holds the source, so the id is this source's
    if background is not None:
        found = background._result(source)
        if found is not None:
            return found
    return encode_corpus(source.tokenizer)
