"""Training the demo pair on text that ships with Python: its standard library's source files.

Both models are Qwen2 architectures with the real Qwen2.5 tokenizer. A softmax over 151,665 ids is too costly to
train on two CPU cores in a minute, so both models train on the *compact* vocabulary of the corpus's most frequent
ids plus one row, OTHER, that stands for every other id: rarer ids read as OTHER and are never a training target,
so OTHER's logit is pushed down. The trained weights are then expanded to the real row counts: an id outside the
compact vocabulary — a rare token, an added token, a padding row — gets OTHER's row in the input embedding and in
``lm_head``.

1. Both models start from the corpus's bigram statistics: a truncated SVD of the centred log-probability table
   log P(next | current) gives token vectors for the input embedding (left factors) and ``lm_head`` (right factors):
   a bigram model in the first forward pass, at rank = hidden size.
2. The target trains on next-token prediction (cross-entropy) on windows of the corpus.
3. The draft is distilled from the target: the target's distribution (its top 64 ids, renormalised) at every
   position of a fixed set of windows is cached once, and the draft trains on the KL divergence to it — which is how
   production drafts are made, at a size two CPU cores can afford.

Everything is seeded: the same Python gives the same checkpoints.
"""

from __future__ import annotations

import sysconfig
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# the stdlib modules whose source makes the corpus, in this order (present in every CPython 3.11+); the bench's
# default prompts come from other modules (vocabcheck.bench.PROMPT_MODULES)
CORPUS_MODULES = (
    "argparse.py", "dataclasses.py", "functools.py", "json/decoder.py", "json/encoder.py", "pathlib.py",
    "textwrap.py", "shutil.py", "tempfile.py", "logging/__init__.py", "subprocess.py", "typing.py", "enum.py",
    "inspect.py", "collections/__init__.py", "configparser.py", "csv.py", "difflib.py", "string.py", "random.py",
)


@dataclass(frozen=True)
class TrainPlan:
    corpus_tokens: int = 250_000
    compact_vocab: int = 4096  # the most frequent ids (OTHER included); rarer ones read as OTHER
    seq_len: int = 64
    batch: int = 32
    target_steps: int = 100
    target_lr: float = 2e-3
    teacher_windows: int = 768  # windows whose target distributions the draft learns from
    teacher_top: int = 64
    draft_batch: int = 16  # half the target's batch: the same acceptance as 32 (92.5%) in half the time
    draft_steps: int = 600
    draft_lr: float = 1e-2
    seed: int = 1234


@dataclass(frozen=True)
class TrainReport:
    corpus_files: int
    corpus_tokens: int
    coverage: float  # share of corpus tokens inside the compact vocabulary
    compact_vocab: int
    target_steps: int
    draft_steps: int
    target_loss: float
    draft_kl: float
    seconds: float


def stdlib_corpus() -> tuple[list[str], list[str]]:
    root = Path(sysconfig.get_paths()["stdlib"])
    names, texts = [], []
    for name in CORPUS_MODULES:
        path = root / name
        if path.is_file():
            names.append(name)
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
    return names, texts


def train_pair(tokenizer, target_shape, draft_shape, plan: TrainPlan = TrainPlan(),
               progress: Callable[[str], None] | None = None):
    """Train (target, draft) state dicts at their full row counts; returns (target_state, draft_state, report)."""
    import torch

    say = progress or (lambda message: None)
    with torch.enable_grad():
        return _train(tokenizer, target_shape, draft_shape, plan, say)


def _train(tokenizer, target_shape, draft_shape, plan: TrainPlan, say: Callable[[str], None]):
    import torch
    import torch.nn.functional as F

    start = time.perf_counter()
    torch.manual_seed(plan.seed)
    generator = torch.Generator().manual_seed(plan.seed)
    names, texts = stdlib_corpus()
    ids: list[int] = []
    for encoding in tokenizer.encode_batch(texts, add_special_tokens=False):
        ids.extend(encoding.ids)
    ids = ids[: plan.corpus_tokens]
    kept = [token for token, _ in Counter(ids).most_common(plan.compact_vocab - 1)]
    compact_of = {token: i for i, token in enumerate(kept)}
    other = len(kept)
    vocab = other + 1
    data = torch.tensor([compact_of.get(t, other) for t in ids])
    coverage = float((data != other).float().mean())
    windows = data[: len(data) // (plan.seq_len + 1) * (plan.seq_len + 1)].view(-1, plan.seq_len + 1)

    def labels(batch):
        return batch[:, 1:].masked_fill(batch[:, 1:] == other, -100)  # OTHER is never a target

    say("factorising the corpus's bigram statistics")
    counts = torch.zeros(vocab, vocab)
    counts.index_put_((data[:-1], data[1:]), torch.ones(len(data) - 1), accumulate=True)
    counts[:, other] = 0.0
    log_probs = torch.log(counts + 0.05) - torch.log((counts + 0.05).sum(1, keepdim=True))
    log_probs -= log_probs.mean(1, keepdim=True)
    rank = max(target_shape.hidden, draft_shape.hidden)
    u, s, v = torch.svd_lowrank(log_probs, q=rank, niter=2)
    left, right = u * s.sqrt(), v * s.sqrt()

    target = _compact_model(target_shape, vocab)
    _bigram_init(target, left, right, target_shape)

    def next_token_loss(step):
        batch = windows[torch.randint(len(windows), (plan.batch,), generator=generator)]
        logits = target(input_ids=batch[:, :-1]).logits
        return F.cross_entropy(logits.reshape(-1, vocab), labels(batch).reshape(-1))

    loss_value = _fit(target, plan.target_steps, plan.target_lr, next_token_loss,
                      lambda step, value: say(f"training the target: step {step}/{plan.target_steps}, "
                                              f"loss {value:.2f}"))

    say("caching the target's distributions for the draft")
    chosen = windows[torch.randperm(len(windows), generator=generator)[: plan.teacher_windows]][:, :-1]
    with torch.no_grad():
        tops = [torch.topk(torch.log_softmax(target(input_ids=part).logits, -1), plan.teacher_top)
                for part in chosen.split(64)]
    top_ids = torch.cat([t.indices for t in tops])
    top_p = torch.softmax(torch.cat([t.values for t in tops]), dim=-1)  # renormalised over the top ids

    draft = _compact_model(draft_shape, vocab)
    _bigram_init(draft, left, right, draft_shape)

    def distillation_loss(step):
        rows = torch.randint(len(chosen), (plan.draft_batch,), generator=generator)
        student = torch.log_softmax(draft(input_ids=chosen[rows]).logits, dim=-1)
        p = top_p[rows]
        return (p * (torch.log(p.clamp(min=1e-12)) - student.gather(-1, top_ids[rows]))).sum(-1).mean()

    kl_value = _fit(draft, plan.draft_steps, plan.draft_lr, distillation_loss,
                    lambda step, value: say(f"distilling the draft: step {step}/{plan.draft_steps}, KL {value:.2f}"))

    index = torch.tensor(kept)
    target_state = _expand(target.state_dict(), index, other, target_shape.rows, target_shape.tied)
    draft_state = _expand(draft.state_dict(), index, other, draft_shape.rows, draft_shape.tied)
    report = TrainReport(corpus_files=len(names), corpus_tokens=len(ids), coverage=coverage, compact_vocab=vocab,
                         target_steps=plan.target_steps, draft_steps=plan.draft_steps, target_loss=loss_value,
                         draft_kl=kl_value, seconds=time.perf_counter() - start)
    return target_state, draft_state, report


def _compact_model(shape, vocab: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                         num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                         num_key_value_heads=shape.kv_heads, max_position_embeddings=4096,
                         tie_word_embeddings=shape.tied)
    return Qwen2ForCausalLM(config)


def _bigram_init(model, left, right, shape) -> None:
    """Input embedding from the left factors (unit RMS, as RMSNorm sees it), lm_head from the right ones; a tied
    model takes their mean. Truncated to the model's hidden size."""
    import torch

    a, b = left[:, : shape.hidden], right[:, : shape.hidden]
    scale = a.pow(2).mean(1, keepdim=True).sqrt().clamp(min=1e-6)
    with torch.no_grad():
        if shape.tied:
            model.model.embed_tokens.weight.copy_((a / scale + b * scale.mean()) / 2)
        else:
            model.model.embed_tokens.weight.copy_(a / scale)
            model.lm_head.weight.copy_(b * scale.mean())


def _fit(model, steps: int, lr: float, loss_of: Callable, report: Callable[[int, float], None]) -> float:
    """AdamW with a 10-step warm-up and a linear decay to a tenth; returns the last loss. The model ends in eval
    mode."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 10) * max(0.1, 1 - s / steps))
    model.train()
    value = float("nan")
    for step in range(steps):
        loss = loss_of(step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        value = loss.item()
        if step % max(1, steps // 10) == 0:
            report(step, value)
    model.eval()
    return value


def _expand(state: dict, index, other: int, rows: int, tied: bool) -> dict:
    """Compact-vocabulary weights at the real row count: kept ids get their trained rows, every other id OTHER's."""
    out = {}
    for name, value in state.items():
        value = value.detach().clone()
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            full = value[other].expand(rows, -1).clone()
            full[index] = value[: len(index)]
            value = full
        out[name] = value
    if tied:
        out.pop("lm_head.weight", None)
    return out
