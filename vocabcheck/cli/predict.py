"""`vocabcheck predict`: acceptance, best k and speedup of one or more drafts (and n-gram lookup) for a target,
from teacher-forced passes at prefill speed instead of speculative runs."""

from __future__ import annotations

import contextlib
import shlex
import sys
from pathlib import Path

import typer

from ..methods import AUTO, MAX_K, Method, parse_ks
from .options import (
    ENGINE_CHOICES, BatchSize, Device, Dtype, MaxNewTokens, NgramMax, NgramMin, Seed, TopK, TopP, one_of,
)
from .output import emit_json


def predict(
    ctx: typer.Context,
    target: str = typer.Argument(..., help="The target model (directory or hub id)."),
    drafts: list[str] = typer.Argument(None, help="Candidate draft models; none: n-gram lookup only."),
    prompt: list[str] = typer.Option(None, "--prompt", help="A prompt; repeat for several."),
    prompt_file: Path = typer.Option(None, "--prompt-file",
                                     help="One prompt per line, or JSONL; lines with a \"response\" are recorded "
                                          "traffic (no decoding runs)."),
    chat: bool = typer.Option(False, "--chat", help="Format prompts with the target's chat template."),
    k: str = typer.Option("1,2,3,4,5,6,7,8", "-k", "--num-speculative-tokens",
                          help=f"The k values to predict, comma-separated (1-{MAX_K})."),
    max_new_tokens: MaxNewTokens = 64,
    temperature: list[float] = typer.Option(None, "--temperature",
                                            help="Also predict sampling at this temperature; repeat for several."),
    top_k: TopK = 0,
    top_p: TopP = 1.0,
    seed: Seed = 0,
    batch_size: BatchSize = 1,
    batch_sizes: str = typer.Option(None, "--batch-sizes", metavar="1,4,16",
                                    help="Predict at each of these batch sizes (comma-separated, e.g. 1,4,16) and say "
                                         "which k to serve each with: a table and vLLM's speculative_config."),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help="Sequences run to --max-new-tokens (as bench)."),
    ngram: bool = typer.Option(True, "--ngram/--no-ngram", help="Predict n-gram lookup too."),
    ngram_min: NgramMin = 1,
    ngram_max: NgramMax = 3,
    device: Device = "auto",
    dtype: Dtype = "auto",
    engine: str = typer.Option("vocabcheck", "--engine", parser=one_of("--engine", ENGINE_CHOICES),
                               help="Whose steps price the speedups: vocabcheck's own decoder, or vLLM's (an engine "
                                    "per k, as you would serve; pip install 'vocabcheck\\[vllm]'). Acceptance is "
                                    "predicted the same either way."),
    json_out: bool = typer.Option(False, "--json", help="Print the prediction as JSON (schema vocabcheck.predict/1)."),
    markdown: bool = typer.Option(False, "--markdown", help="Print the prediction as Markdown."),
    report: Path = typer.Option(None, "--report", help="Write predict.md, predict.json and speedup.png here."),
) -> None:
    """Predict the acceptance, best k and speedup of each draft, ranked, without running speculation."""
    from ..decode import DecodeOptions, Sampling
    from ..decode.load.loading import Prompt, read_prompt_file
    from ..errors import BadOption, ExitCode, VocabcheckError
    from ..engines import vllm
    from ..predict import serving
    from ..predict.predictor import PredictRequest, predict_batches
    from ..render import predict_report, terminal

    predict_report.check_destination(report)  # before anything runs: one line, exit code 2
    sizes = _batch_sizes(ctx, batch_size, batch_sizes)
    Sampling(temperature=1.0, top_k=top_k, top_p=top_p)  # run's checks of top-k and top-p, before anything loads
    for value in temperature or ():
        Sampling(temperature=value)
    request = PredictRequest(
        target=target, drafts=tuple(drafts or ()), k_values=_k_values(k, BadOption),
        temperatures=tuple(temperature or ()), top_k=top_k, top_p=top_p, batch_size=sizes[0], batch_sizes=sizes[1:],
        chat=chat, ngram=ngram, device=device, dtype=dtype, engine=engine,
        options=DecodeOptions(method=Method.NONE, max_new_tokens=max_new_tokens, seed=seed, ngram_min=ngram_min,
                              ngram_max=ngram_max, ignore_eos=ignore_eos))
    if not request.drafts and not ngram:
        raise VocabcheckError("nothing to predict: give a DRAFT model, or leave n-gram lookup on")
    prompts = [Prompt(p) for p in (prompt or [])]
    if prompt_file is not None:
        prompts += read_prompt_file(prompt_file)
    if not prompts:
        raise VocabcheckError("give at least one --prompt or a --prompt-file")
    if engine == vllm.NAME:  # before anything loads: one line where vLLM is not installed
        vllm.require()
    err = terminal.console(stderr=True)
    with _progress(err, request.units(), quiet=not sys.stderr.isatty()) as advance:
        predictions = predict_batches(request, prompts, progress=advance)
    prediction = predictions[0]
    serve = vllm.serve_configs(target, serving.plans(predictions), ngram_min=ngram_min, ngram_max=ngram_max)
    command = "vocabcheck " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else "vocabcheck predict"
    if report is not None:
        predict_report.write_report(report, predictions, serve, command=command)
    if json_out:
        emit_json(predict_report.predict_document(predictions, serve, command=command))
    elif markdown:
        sys.stdout.write(predict_report.predict_markdown(predictions, serve, command=command))
    else:
        predict_report.print_prediction(terminal.console(), predictions, serve)
    named = [c for c in prediction.candidates if c.method.needs_draft]
    if named and all(c.refused for c in named):  # no named draft can run with this target
        raise typer.Exit(ExitCode.FAILED)


def _batch_sizes(ctx: typer.Context, batch_size: int, listed: str | None) -> tuple[int, ...]:
    """The batch sizes to predict, the first one's tables shown in full: ``--batch-size`` alone, or ``--batch-sizes``
    (in the order given, each once); both at once is one line, exit code 2."""
    from ..errors import BadOption
    from .options import batch_sizes

    if listed is None:
        return (batch_size,)
    source = ctx.get_parameter_source("batch_size")  # click's ParameterSource (typer may bundle its own click)
    if getattr(source, "name", None) == "COMMANDLINE":
        raise BadOption("give --batch-size or --batch-sizes, not both")
    return tuple(dict.fromkeys(batch_sizes(listed)))


def _k_values(text: str, error) -> tuple[int, ...]:
    """predict's k values: the one k parser's list (:func:`vocabcheck.methods.parse_ks`), fixed lengths only."""
    values = parse_ks(text)
    if AUTO in values:
        raise error("-k auto is what predict chooses among; give the fixed k values to predict, such as 1,2,4,8")
    return tuple(sorted(values))


@contextlib.contextmanager
def _progress(err, total: int, quiet: bool):
    """Progress over the passes on stderr, never stdout; yields the callback called after each pass. On a terminal a
    bar; anywhere else (``quiet``: a file, a pipe, a CI log) a line per pass and a heartbeat while one runs long
    (:mod:`vocabcheck.render.phases`)."""
    if quiet:
        from ..render.phases import phases

        done = [0]
        # the first line waits for the heartbeat: input found wrong while loading stays a one-line error
        with phases(err, f"loading the models and predicting ({total} passes)", announce=False) as say:
            def advance(label: str) -> None:
                done[0] += 1
                say(f"predicting: {done[0]} of {total} passes done ({label})")

            yield advance
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task("predicting", total=total)
        yield lambda label: bar.update(task, advance=1, description=label)
