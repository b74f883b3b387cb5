"""``-k auto`` against fixed k 1, 2, 4, 8 and no speculation, side by side in one process, on the demo pair (greedy,
eos ignored), and against a random (untrained) draft of the demo draft's shape ("weak"). Tokens/s over the same
prompts, configurations interleaved, median of ROUNDS alternating rounds, after one short warm-up call of each.

    python -m benchmarks.adaptive_k BATCH PROMPTS NEW_TOKENS ROUNDS     # e.g. 16 16 32 3
"""
import statistics, sys, time
import torch
from vocabcheck.bench import default_prompts
from vocabcheck.decode import DecodeOptions
from vocabcheck.decode.loading import Prompt
from vocabcheck.decode.session import RunRequest, start_session
from vocabcheck.demo.pair import demo_pair

batch, prompts_n, new, rounds = (int(a) for a in sys.argv[1:5])
pair = demo_pair()
session = start_session(RunRequest(target=str(pair.target), draft=str(pair.draft), methods=("draft", "ngram", "none"),
                                   device="cpu", dtype="float32"))
real_draft = session.draft_model
torch.manual_seed(0)
weak_draft = type(real_draft)(real_draft.config).eval()
ids = session.encode([Prompt(t) for t in default_prompts(prompts_n)], False)
configs = [("none", "auto", "demo")] + [(m, k, "demo") for m in ("draft", "ngram") for k in (1, 2, 4, 8, "auto")] \
    + [("draft", "auto", "weak"), ("draft", 1, "weak")]


def once(config, n):
    method, k, which = config
    session.draft_model = weak_draft if which == "weak" else real_draft
    start, tokens, chosen = time.perf_counter(), 0, []
    for begin in range(0, len(ids), batch):
        g = session.generate_ids(ids[begin:begin + batch], DecodeOptions(method=method, k=k, max_new_tokens=n,
                                                                          ignore_eos=True))
        tokens += g.metrics.generated
        chosen.append((g.metrics.proposal_length, g.metrics.plain_steps, g.metrics.verify_passes))
    return tokens / (time.perf_counter() - start), chosen


for c in configs:
    once(c, 8)
times = {c: [] for c in configs}
last = {}
for r in range(rounds):
    for c in (configs if r % 2 == 0 else configs[::-1]):
        t, last[c] = once(c, new)
        times[c].append(t)
        print(c, f"{t:.1f}", flush=True)
base = statistics.median(times[configs[0]])
print(f"batch {batch}: {len(ids)} prompts x {new} tokens; none {base:.1f} tok/s (median of {rounds})")
for c in configs[1:]:
    t = statistics.median(times[c])
    pl = sum(x[0] for x in last[c]) / len(last[c])
    ps = sum(x[1] for x in last[c]); vp = sum(x[2] for x in last[c])
    print(f"  {c[2]:4} {c[0]:5} k={c[1]!s:4} {t:7.1f} tok/s {t / base:5.2f}x none | proposal length {pl:.2f}, "
          f"plain steps {ps}/{vp}")
