"""Whether a loaded model's cache behaves the way the decoder relies on, checked on its real weights and device.

The config-based refusals (:func:`vocabcheck.decode.layout.rollback_problem`) run before any weight is loaded, but a
config does not say everything: RWKV ignores the cache it is given, xLSTM wants its own, a layer type the config does
not name would be masked wrongly. So before a model is used for speculation (or for plain decoding through
vocabcheck's own loop), the decoder's own path (:class:`vocabcheck.decode.state.KVState`) runs on a few tokens and
every logit it gives is compared with one forward of the model over the same tokens, without a cache:

1. a prefill of two rows, one of them left-padded;
2. one token per row, as a step after the prefill;
3. a chunk of three tokens per row, as a verification;
4. a rollback in which the rows take back different counts (one row keeps a masked hole), then a chunk that feeds
   the taken-back tokens again and goes on (a cache that kept them, or a state that absorbed them, now sees them
   twice, at other positions or with duplicate keys);
5. one row leaves the batch, and the other takes one more step.

A difference larger than the dtype allows (relative to the spread of the model's own logits) names the first step
that failed; an exception raised on the way names itself. Two rows of 12 and 9 tokens: two reference forwards and
five through the cache, 48 token positions in all (``reports/cache-check.md`` has its cost next to loading).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..errors import UnsupportedModel, VocabcheckError, exception_line
from .layout import AttentionLayout, rollback_problem

# largest difference that still counts as equal, per position: the root mean square over the vocabulary of
# (cache path - one forward), relative to the spread (std) of the model's own logits. The two paths sum in other
# orders, so they differ by rounding: about 1e-5 in float32 on the demo pair; in bfloat16 one step of the dtype on a
# large logit is already 0.05 of a typical spread, which is why the mean over the vocabulary and not the largest
# entry is compared. A wrong cache changes the whole vector at the positions it touches: about 1 (RWKV 1.4).
TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-3, torch.float16: 0.05, torch.bfloat16: 0.1}
SPECULATION = "speculative decoding (draft and ngram) cannot run it losslessly; plain decoding (--method none) runs " \
              "it through transformers' own generate"

# the two rows' tokens, as offsets into one seeded draw: A is 12 tokens, B 9
_A, _B, _DRAW = slice(0, 12), slice(12, 21), 21


def check_models(methods, target, draft, target_where, draft_where) -> str | None:
    """Run the check on every model the chosen ``methods`` drive through vocabcheck's loop. A model that fails is
    refused (one line, exit 2) where a speculative method would use it; where only plain decoding is asked, the
    target's problem is returned and the caller hands the model to transformers' own ``generate``."""
    speculative = any(method != "none" for method in methods)
    if draft is not None and "draft" in methods:
        problem = cache_problem(draft)
        if problem is not None:
            raise UnsupportedModel(f"{problem}; {SPECULATION}", draft_where)
    if target is None:  # a draft added to a session whose target was checked already
        return None
    if not speculative and rollback_problem(target.config, type(target)) is not None:
        return None  # the engine already hands it to transformers
    problem = cache_problem(target)
    if problem is not None and speculative:
        raise UnsupportedModel(f"{problem}; {SPECULATION}", target_where)
    return problem


def cache_problem(model, layout: AttentionLayout | None = None) -> str | None:
    """None where vocabcheck's cache path gives the model's own logits on a few tokens, else the failing property
    in a phrase (``"<model type>: ..."``)."""
    name = getattr(model.config, "model_type", "?")
    device = next(model.parameters()).device
    rows = _embedding_rows(model)
    tokens = torch.randint(0, rows, (_DRAW,), generator=torch.Generator().manual_seed(0)).tolist()
    a, b = tokens[_A], tokens[_B]
    try:
        with torch.inference_mode():
            references = [_one_forward(model, row, device) for row in (a, b)]
    except Exception as exc:  # the model's own code, on its own: nothing of vocabcheck's ran yet
        return f"{name}: its own forward over {len(a)} tokens fails ({exception_line(exc, 200)})"
    dtype = next(model.parameters()).dtype
    tolerance = TOLERANCE.get(dtype, TOLERANCE[torch.float32])
    scale = max(float(references[0].std()), 1e-6)
    try:
        with torch.inference_mode():
            failed = _first_failure(model, device, layout, (a, b), references,
                                    lambda got, want: _differs(got, want, scale, tolerance))
    except VocabcheckError as exc:
        return exc.problem
    except Exception as exc:  # raised inside the model's code, given vocabcheck's cache and masks
        return f"{name}: its forward with vocabcheck's KV cache fails ({exception_line(exc, 200)})"
    if failed is None:
        return None
    step, error = failed
    return (f"{name}: the cache check on the loaded weights failed: {step}, its logits differ from one forward "
            f"over the same tokens (difference {error:.3g} of the logits' spread; {_dtype_name(dtype)} allows "
            f"{tolerance:g})")


def _first_failure(model, device, layout, rows, references, differs: Callable) -> tuple[str, float] | None:
    """Drive KVState through prefill, step, chunk, rollback and a dropped row; the first step whose logits differ
    from the references, with its difference."""
    from .state import KVState

    a, b = rows
    ref_a, ref_b = references
    state = KVState(model, 2, device, layout, fast_head=False)  # the cache is checked, not the head's kernel
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


def _one_forward(model, tokens: list[int], device) -> torch.Tensor:
    """The model's own logits [n, V] over ``tokens``, in one forward, without a cache: what the decoder must give."""
    ids = torch.tensor([tokens], device=device)
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
