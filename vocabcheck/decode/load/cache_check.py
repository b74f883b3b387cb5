"""Whether a loaded model's cache behaves the way the decoder relies on, checked on its real weights and device.

The config-based refusals (:func:`vocabcheck.decode.load.layout.rollback_problem`) run before any weight is loaded, but a
config does not say everything: RWKV ignores the cache it is given, xLSTM wants its own, a layer type the config does
not name would be masked wrongly. So before a model is used for speculation (or for plain decoding through
vocabcheck's own loop), the decoder's own path (:class:`vocabcheck.decode.state.KVState`) runs on a few tokens and
what it gives is compared with one forward of the model over the same tokens, without a cache:

1. a prefill of two rows, one of them left-padded;
2. one token per row, as a step after the prefill;
3. a chunk of three tokens per row, as a verification;
4. a rollback in which the rows take back different counts (one row keeps a masked hole), then a chunk that feeds
   the taken-back tokens again and goes on (a cache that kept them, or a state that absorbed them, now sees them
   twice, at other positions or with duplicate keys);
5. one row leaves the batch, and the other takes one more step.

What is compared: the final hidden states (the decoder's ``last_hidden_state``, before the output head) where the
model's logits are a function of the hidden state at the same position and nothing else (:data:`POSITIONWISE_HEAD`:
``lm_head``, then at most a soft-cap or a scale, checked against their transformers source): equal hidden states then
give equal logits, so the cache is proved just as well, without the output head (on a 152k-row vocabulary most of
the check's cost). Every other model, and any whose head is not known, compares its logits.

A difference larger than the dtype allows (relative to the spread of the model's own values) names the first step
that failed; an exception raised on the way names itself. Two rows of 12 and 9 tokens: two reference forwards and
five through the cache, 48 token positions in all (``reports/cache-check.md`` has its cost next to loading).

:func:`loop_problem` is the one decision every entry point takes (the session, and
:func:`vocabcheck.decode.engine.generate` called directly): the config's refusal, else the check's, decided once per
model object (and its device and dtype) and kept while the model lives.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch

from ...errors import UnsupportedModel, VocabcheckError, exception_line
from ...methods import Method
from ..cpu.head import PLAIN_HEAD
from .layout import AttentionLayout, rollback_problem

# largest difference that still counts as equal, per position: the root mean square over the vector (the vocabulary's
# logits, or the hidden state's features) of (cache path - one forward), relative to the spread (std) of the model's
# own values over row A. The two paths sum in other orders, so they differ by rounding: about 1e-5 in float32 on the
# demo pair; in bfloat16 one step of the dtype on a large value is already 0.05 of a typical spread, which is why the
# mean over the vector and not the largest entry is compared. A wrong cache changes the whole vector at the positions
# it touches: about 1 (RWKV 1.4). The same bounds serve hidden states: logits are the head's product of the hidden
# state, whose relative error it passes on about one for one (it adds its own rounding on top), so rounding differs
# between the paths no more in the hidden states than in the logits, and a wrong cache's difference is of the same
# order in both (measured: docs/decoder.md, "The cache check").
TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-3, torch.float16: 0.05, torch.bfloat16: 0.1}
SPECULATION = "speculative decoding (draft and ngram) cannot run it losslessly; plain decoding (--method none) runs " \
              "it through transformers' own generate"
# Causal LMs whose logits at a position are a function of the decoder's last hidden state at that position alone:
# ``lm_head(hidden)`` (PLAIN_HEAD), then a soft-cap (Gemma 2, 3) or a scale (Cohere, Granite), read in their
# transformers source; ``model.model`` is the module whose ``last_hidden_state`` their forward takes (their
# ``get_decoder()`` is not: Llama 4's returns the whole model).
POSITIONWISE_HEAD = PLAIN_HEAD | {"Gemma2ForCausalLM", "Gemma3ForCausalLM", "CohereForCausalLM", "GraniteForCausalLM",
                                  "Llama4ForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM"}

# the two rows' tokens, as offsets into one seeded draw: A is 12 tokens, B 9
_A, _B, _DRAW = slice(0, 12), slice(12, 21), 21

# model → (device, dtype, its loop_problem): the decision, once per model object while it lives
_VERDICTS: "weakref.WeakKeyDictionary[torch.nn.Module, tuple[torch.device, torch.dtype, str | None]]" = \
    weakref.WeakKeyDictionary()


class NotFinite(str):
    """A problem that no decoding gets around, transformers' own included: the model's own forward gives a NaN or an
    infinity on the check's tokens. Refused for every method, plain decoding too."""


def check_models(methods, target, draft, target_where, draft_where) -> str | None:
    """The decision for every model the chosen ``methods`` drive (:func:`loop_problem`). A model vocabcheck's loop
    cannot drive is refused (one line, exit 2) where a speculative method would use it; where only plain decoding is
    asked, the target's problem is returned and the caller hands the model to transformers' own ``generate``."""
    speculative = any(Method(m).proposes for m in methods)
    if draft is not None and any(Method(m).needs_draft for m in methods):
        problem = loop_problem(draft)
        if problem is not None:
            raise UnsupportedModel(problem, draft_where)
    if target is None:  # a draft added to a session whose target was checked already
        return None
    problem = loop_problem(target)
    if problem is not None and (speculative or isinstance(problem, NotFinite)):
        raise UnsupportedModel(problem, target_where)
    return problem


def loop_problem(model) -> str | None:
    """Why vocabcheck's own decoding loop cannot drive ``model`` (None where it can), as the line that refuses
    speculation: the config's refusal (:func:`rollback_problem`), else the behavioural check's (:func:`cache_problem`).
    Decided once per model object, device and dtype; later calls return the kept verdict."""
    parameter = next(model.parameters())
    kept = _VERDICTS.get(model)
    if kept is not None and kept[:2] == (parameter.device, parameter.dtype):
        return kept[2]
    problem = rollback_problem(model.config, type(model))
    if problem is None:
        problem = cache_problem(model)
        if problem is not None and not isinstance(problem, NotFinite):
            problem = f"{problem}; {SPECULATION}"
    _VERDICTS[model] = (parameter.device, parameter.dtype, problem)
    return problem


def cache_problem(model, layout: AttentionLayout | None = None) -> str | None:
    """None where vocabcheck's cache path gives the model's own hidden states (or logits: see the module's
    docstring) on a few tokens, else the failing property in a phrase (``"<model type>: ..."``). Runs the check
    every time it is called (:func:`loop_problem` keeps its verdict)."""
    name = getattr(model.config, "model_type", "?")
    device = next(model.parameters()).device
    hidden = decoder_of(model)
    what = "logits" if hidden is None else "final hidden states"
    rows = _embedding_rows(model)
    tokens = torch.randint(0, rows, (_DRAW,), generator=torch.Generator().manual_seed(0)).tolist()
    a, b = tokens[_A], tokens[_B]
    try:
        with torch.inference_mode():
            references = [_one_forward(model, row, device, hidden) for row in (a, b)]
    except Exception as exc:  # the model's own code, on its own: nothing of vocabcheck's ran yet
        return f"{name}: its own forward over {len(a)} tokens fails ({exception_line(exc, 200)})"
    if not all(bool(torch.isfinite(reference).all()) for reference in references):
        return NotFinite(f"{name}: its own forward over {len(a)} tokens gives values that are not finite (a NaN or an "
                         "infinity): no decoding can use it")
    dtype = next(model.parameters()).dtype
    tolerance = TOLERANCE.get(dtype, TOLERANCE[torch.float32])
    scale = max(float(references[0].std()), 1e-6)
    try:
        with torch.inference_mode():
            failed = _first_failure(model, device, layout, hidden, (a, b), references,
                                    lambda got, want: _differs(got, want, scale, tolerance))
    except VocabcheckError as exc:
        return exc.problem
    except Exception as exc:  # raised inside the model's code, given vocabcheck's cache and masks
        return f"{name}: its forward with vocabcheck's KV cache fails ({exception_line(exc, 200)})"
    if failed is None:
        return None
    step, error = failed
    return (f"{name}: the cache check on the loaded weights failed: {step}, its {what} differ from one forward "
            f"over the same tokens (difference {error:.3g} of their spread; {_dtype_name(dtype)} allows "
            f"{tolerance:g})")


def decoder_of(model) -> torch.nn.Module | None:
    """The decoder whose final hidden states the check compares (the head is position-wise and known), or None: the
    check compares the logits."""
    decoder = getattr(model, "model", None)
    return decoder if type(model).__name__ in POSITIONWISE_HEAD and isinstance(decoder, torch.nn.Module) else None


def _first_failure(model, device, layout, hidden: torch.nn.Module | None, rows, references, differs: Callable
                   ) -> tuple[str, float] | None:
    """Drive KVState through prefill, step, chunk, rollback and a dropped row; the first step whose output differs
    from the references, with its difference."""
    from ..state import KVState

    a, b = rows
    ref_a, ref_b = references
    # the cache is checked, not the head's kernel (choosing it times each new row count: more than the check costs)
    state = KVState(model, 2, device, layout, fast_head=False, hidden_from=hidden)
    ids = torch.tensor([a[:6], [0, 0, 0] + b[:3]], device=device)
    real = torch.tensor([[True] * 6, [False] * 3 + [True] * 3], device=device)
    steps = [
        ("after a prefill with a left-padded row", lambda: state.forward(ids, keep=6, real=real),
         [ref_a[:6], ref_b[:3]], [slice(0, 6), slice(3, 6)]),
        ("after a step of one token",
         lambda: state.forward(torch.tensor([[a[6]], [b[3]]], device=device), keep=1),
         [ref_a[6:7], ref_b[3:4]], None),
        ("after a chunk of proposals", lambda: state.forward(torch.tensor([a[7:10], b[4:7]], device=device), keep=3),
         [ref_a[7:10], ref_b[4:7]], None),
        ("after a rollback in which rows took back different counts",
         lambda: _rolled_back(state, a[8:11], b[6:9], device), [ref_a[8:11], ref_b[6:9]], None),
        ("after a row left the batch", lambda: _one_row_left(state, a[11], device), [ref_a[11:12]], None),
    ]
    for step, run, wanted, kept in steps:
        got = run()
        for row, want in enumerate(wanted):
            error = differs(got[row] if kept is None else got[row, kept[row]], want)
            if error is not None:
                return step, error
    return None


def _rolled_back(state, chunk_a, chunk_b, device) -> torch.Tensor:
    """Row A takes back two tokens, row B one (a hole that stays masked), then both get a chunk that starts with
    what they took back."""
    state.rollback(torch.tensor([2, 1], device=device), [2, 1])
    return state.forward(torch.tensor([chunk_a, chunk_b], device=device), keep=3)


def _one_row_left(state, token: int, device) -> torch.Tensor:
    state.keep_rows(torch.tensor([0], device=device))
    return state.forward(torch.tensor([[token]], device=device), keep=1)


def _one_forward(model, tokens: list[int], device, hidden: torch.nn.Module | None) -> torch.Tensor:
    """The model's own logits [n, V] (or final hidden states [n, H]) over ``tokens``, in one forward, without a
    cache: what the decoder must give."""
    ids = torch.tensor([tokens], device=device)
    if hidden is not None:
        out = hidden(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
        return out.last_hidden_state[0].float()
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    return out.logits[0].float()


def _differs(got: torch.Tensor, want: torch.Tensor, scale: float, tolerance: float) -> float | None:
    """The largest per-position root-mean-square difference relative to ``scale``, where it is over ``tolerance``
    (or not finite), else None."""
    got = got.float()
    if got.shape != want.shape:
        return float("inf")
    error = float((got - want).square().mean(dim=-1).sqrt().max()) / scale
    return None if error <= tolerance else error  # NaN compares False: reported


def _embedding_rows(model) -> int:
    """Token ids the model embeds: the input embedding's rows (config.vocab_size where it has none)."""
    rows = getattr(model.get_input_embeddings(), "num_embeddings", None)
    return int(rows or model.config.get_text_config().vocab_size)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
