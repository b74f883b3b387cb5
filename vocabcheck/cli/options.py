"""The options several commands share, declared once as ``Annotated`` aliases (as huggingface_hub's CLI does): a
command names the alias and gives the default, ``no_probe: NoProbe = False``.

Their values are checked while the command line is parsed, before any heavy import (torch, transformers): a value
that is not a number, or a device or dtype no one could mean, is one line and exit code 2 (``error: ...``), not a
usage block. Ranges (``--max-new-tokens`` at least 1, ``--top-p`` in (0, 1]...) are checked where they are defined,
by :class:`vocabcheck.decode.DecodeOptions` and :class:`vocabcheck.decode.Sampling`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated

import typer

from ..errors import VocabcheckError
from ..methods import DEFAULT_K_MAX, MAX_K, Method, parse_k, parse_ks

# (the checks raise VocabcheckError, not the ValueError BadOption also is: typer would wrap a ValueError in its own
# usage block)

# the spellings vocabcheck.decode.device resolves (tests/test_cli_options.py keeps the two lists equal); that module
# imports torch, which this check comes before
DTYPES = ("auto", "float32", "bfloat16", "float16")
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def whole_number(flag: str, minimum: int | None = None, maximum: int | None = None) -> Callable[[object], int]:
    """A parser for an integer option: one line for anything else (``-k four``, ``--seed 1.5``) and for a number
    outside [minimum, maximum]."""
    def parse(value: object) -> int:
        if isinstance(value, int):
            number = value
        else:
            try:
                number = int(str(value).strip())
            except ValueError:
                raise VocabcheckError(f"{flag} takes a whole number, not {value!r}") from None
        if minimum is not None and number < minimum:
            raise VocabcheckError(f"{flag} must be at least {minimum}, not {number}")
        if maximum is not None and number > maximum:
            raise VocabcheckError(f"{flag} must be at most {maximum:,}, not {_short(number)}")
        return number
    return parse


def batch_sizes(text: str, flag: str = "--batch-sizes") -> tuple[int, ...]:
    """A comma-separated list of batch sizes (bench, predict): each a whole number from 1 to ``MAX_BATCH_SIZE``."""
    try:
        sizes = tuple(int(v.strip()) for v in str(text).split(",") if v.strip())
    except ValueError:
        raise VocabcheckError(f"{flag} takes a comma-separated list of whole numbers, not {text!r}") from None
    if not sizes:
        raise VocabcheckError(f"{flag} is empty")
    if min(sizes) < 1:
        raise VocabcheckError(f"{flag} must be positive, not {min(sizes)}")
    if max(sizes) > MAX_BATCH_SIZE:
        raise VocabcheckError(f"{flag} must be at most {MAX_BATCH_SIZE:,}, not {_short(max(sizes))}")
    return sizes


def _short(number: int) -> str:
    return f"{number:,}" if abs(number) < 10**15 else f"about 10^{len(str(abs(number))) - 1}"


# the largest counts any command takes (one home: every option that takes one uses these)
MAX_NEW_TOKENS = 1 << 20  # and the model's context, checked once it is read
MAX_BATCH_SIZE = 4096
MAX_SEED = 2**63 - 1  # torch's generator takes a signed 64-bit seed
MAX_WARMUP = 100
MAX_REPEAT = 1000


def real_number(flag: str) -> Callable[[object], float]:
    """A parser for a float option: one line for what is not a number (``--temperature hot``)."""
    def parse(value: object) -> float:
        try:
            return float(value) if isinstance(value, (int, float)) else float(str(value).strip())
        except ValueError:
            raise VocabcheckError(f"{flag} takes a number, not {value!r}") from None
    return parse


def proposal_lengths(flag: str, many: bool = False) -> Callable[[object], object]:
    """A parser for ``-k``: ``auto`` or a whole number from 1 to 64 (``many``: a comma-separated list of them, kept as
    text for the command); one line for anything else (:func:`vocabcheck.methods.parse_k`, the one k parser)."""
    def parse(value: object) -> object:
        if not many:
            return parse_k(value, flag)
        parse_ks(str(value), flag)
        return str(value)
    return _one_line(parse)


def _one_line(parse: Callable[[object], object]) -> Callable[[object], object]:
    """A library parser as an option's parser: its BadOption (also a ValueError, which click would prefix with
    "Value error") raised as the plain one-line error every option gives."""
    def checked(value: object) -> object:
        try:
            return parse(value)
        except VocabcheckError as exc:
            raise VocabcheckError(str(exc)) from None
    return checked


def _device(value: str) -> str:
    if not _DEVICE.fullmatch(value.strip().lower()):
        raise VocabcheckError(f"--device must be auto, cpu, cuda or cuda:N, not {value!r}")
    return value


def _dtype(value: str) -> str:
    if value not in DTYPES:
        raise VocabcheckError(f"--dtype must be one of {', '.join(DTYPES)}, not {value!r}")
    return value


NoProbe = Annotated[bool, typer.Option("--no-probe", help="Skip the encoding probe of differing tokenizers.")]

# decoding (run, bench)
MaxNewTokens = Annotated[int, typer.Option("--max-new-tokens",
                                           parser=whole_number("--max-new-tokens", maximum=MAX_NEW_TOKENS),
                                           help="Tokens to generate per prompt.")]
Temperature = Annotated[float, typer.Option("--temperature", parser=real_number("--temperature"),
                                            help="0 is greedy; above 0 tokens are sampled.")]
TopK = Annotated[int, typer.Option("--top-k", parser=whole_number("--top-k"),
                                   help="Keep the k most likely tokens (0: off).")]
TopP = Annotated[float, typer.Option("--top-p", parser=real_number("--top-p"),
                                     help="Nucleus sampling mass, in (0, 1] (1: off).")]
Seed = Annotated[int, typer.Option("--seed", parser=whole_number("--seed", 0, MAX_SEED), help="Seed of the sampler.")]
BatchSize = Annotated[int, typer.Option("--batch-size", parser=whole_number("--batch-size", 1, MAX_BATCH_SIZE),
                                        help="Prompts run together (left-padded).")]
NgramMin = Annotated[int, typer.Option("--ngram-min", parser=whole_number("--ngram-min"),
                                       help="Shortest n-gram to match.")]
NgramMax = Annotated[int, typer.Option("--ngram-max", parser=whole_number("--ngram-max"),
                                       help="Longest n-gram to match.")]
SpeculationMethod = Annotated[Method, typer.Option(
    "--method", parser=_one_line(Method.parse), metavar="|".join(Method),
    help="; ".join(f"{m}: {m.help}" for m in Method) + ".")]
ProposalLength = Annotated[str, typer.Option(
    "-k", "--num-speculative-tokens", parser=proposal_lengths("-k / --num-speculative-tokens"),
    help=f"Tokens proposed per step: auto (chosen every step from measured costs and acceptance, 0-{DEFAULT_K_MAX}) "
         f"or a fixed 1-{MAX_K}.")]
def one_of(flag: str, choices: tuple[str, ...]) -> Callable[[object], str]:
    """A parser for an option that takes one of a few words: one line for anything else."""
    def parse(value: object) -> str:
        word = str(value).strip().lower()
        if word not in choices:
            raise VocabcheckError(f"{flag} must be one of {', '.join(choices)}, not {value!r}")
        return word
    return parse


ENGINE_CHOICES = ("vocabcheck", "vllm")
Engine = Annotated[str, typer.Option("--engine", parser=one_of("--engine", ENGINE_CHOICES),
                                     help="What runs the pair: vocabcheck's own decoder, or vLLM (an optional "
                                          "dependency: pip install 'vocabcheck\\[vllm]').")]
Device = Annotated[str, typer.Option("--device", callback=_device, help="auto, cpu, cuda or cuda:N.")]
Dtype = Annotated[str, typer.Option("--dtype", callback=_dtype, help="auto, float32, bfloat16 or float16.")]
AllowIncompatible = Annotated[bool, typer.Option(
    "--allow-incompatible", help="Run an incompatible pair anyway, with raw ids (still lossless).")]
Translate = Annotated[bool, typer.Option(
    "--translate", help="Run a pair whose tokenizers differ through the tokens they share (lossless, greedy and "
                        "sampled).")]
