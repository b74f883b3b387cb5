"""Rich terminal reports: the verdict first, then findings by severity, then the two models side by side."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

from rich.console import Console, Group
from rich.measure import Measurement
from rich.padding import Padding
from rich.panel import Panel
from rich.segment import Segment
from rich.table import Table
from rich.text import Span, Text

from ..findings import Finding, Severity
from ..methods import Method
from ..profile import ModelProfile, SpecialToken
from ..text import printable
from ..verdict import Alignment, Comparison, Verdict
from .paths import short_path, short_paths

VERDICT_STYLE = {Verdict.IDENTICAL: "bold green", Verdict.PADDED_COMPATIBLE: "bold yellow",
                 Verdict.INCOMPATIBLE: "bold red"}
SEVERITY_STYLE = {Severity.ERROR: ("red", "✗"), Severity.WARNING: ("yellow", "!"), Severity.INFO: ("cyan", "·")}
SEVERITY_TITLE = {Severity.ERROR: "Errors", Severity.WARNING: "Warnings", Severity.INFO: "Info"}


def console(stderr: bool = False) -> Console:
    """A console that never reads markup in strings: token strings such as '[INST]' or '[/INST]' and user paths
    reach it verbatim (styles are given as Text objects); and that never prints a control character it is given:
    ESC and its kin from a config, a file name, a hub answer or a token string are shown as escapes
    (:func:`vocabcheck.text.printable`), whatever view they reach it through."""
    return _Console(stderr=stderr, highlight=False, soft_wrap=False, markup=False)


_KEEP = "\n\t"  # a view's own line breaks, and tabs (rich expands them)


class _Console(Console):
    """Every string and Text is made printable before rich lays it out (so tables keep their shape); any segment
    still carrying a control character is made printable as it is written. rich's own control sequences (styles,
    cursor moves of a status line) are not text segments and pass."""

    def render_str(self, text: str, **kwargs) -> Text:
        return super().render_str(printable(text, _KEEP), **kwargs)

    def on_broken_pipe(self) -> None:
        """The reader went away (``vocabcheck compare T D | head -1``): the rest of this console's output goes
        nowhere and the command ends as it would have, with its own exit code (rich's default exits with 1, the code
        of an incompatible pair)."""
        self.quiet = True
        discard_output(self.file)

    def render(self, renderable, options=None) -> Iterable[Segment]:
        if isinstance(renderable, Text):
            renderable = _printable_text(renderable)
        for segment in super().render(renderable, options):
            text = segment.text if segment.control else printable(segment.text, _KEEP)
            yield segment if text is segment.text else Segment(text, segment.style, segment.control)


def print_table(out: Console, table: Table, *, heading_columns: int = 1, max_row_lines: int = 4) -> None:
    """``table`` where it reads at the console's width (80 columns in a file or a CI log, unless COLUMNS says more);
    otherwise stacked, one block per row: where a cell would be cut to ``…`` (a column narrower than its longest
    word) or a row would wrap over more than ``max_row_lines`` lines. A block is headed by the row's first
    ``heading_columns`` cells, then its other columns as ``header  value`` lines."""
    width = out.width
    rows = table.row_count
    fits = Measurement.get(out, out.options.update_width(10 ** 6), table).minimum <= width  # unclamped
    fits = fits and not _cuts_a_word(out, table)
    if fits and rows:  # the rows' lines: a long title wraps to the table's width but cuts no cell
        title, table.title = table.title, None
        try:
            fits = len(out.render_lines(table, out.options, pad=False)) <= 4 + rows * max_row_lines
        finally:
            table.title = title
    if fits:
        out.print(table)
        return
    out.print(stacked(table, heading_columns=heading_columns, width=width))


def _cuts_a_word(out: Console, table: Table) -> bool:
    """Whether rich, laying ``table`` out at the console's width, would give a column less room than its longest
    word (a folded cell breaks a word in two, ``(model.embed_tokens.weigh`` / ``t)``)."""
    options = out.options
    try:
        widths = table._calculate_column_widths(out, options)
        needed = [table._measure_column(out, options, column).minimum for column in table.columns]
    except AttributeError:  # a rich without these: the measurement above decides alone
        return False
    return any(width < least for width, least in zip(widths, needed))


def stacked(table: Table, *, heading_columns: int, width: int) -> Group:
    """The rows of ``table`` as blocks: a heading line, then ``header  value`` pairs laid out as many to a line as
    ``width`` holds (a long value alone on its line, wrapped at its words)."""
    columns = table.columns
    headers = [_as_text(column.header).plain for column in columns]
    cells = [list(column.cells) for column in columns]
    keys = range(heading_columns, len(columns))
    key_width = max((len(headers[i]) for i in keys), default=0)
    value_width = max((_as_text(cells[i][r]).cell_len for i in keys for r in range(table.row_count)), default=0)
    per_line = max(1, width // (key_width + value_width + 4))  # 2 columns of indent, 2 between key and value, 2 after
    parts: list = []
    if table.title:
        parts.append(_as_text(table.title, style="bold"))
    for r in range(table.row_count):
        heading = _as_text(cells[0][r], style="bold").copy() if heading_columns else Text()
        for i in range(1, heading_columns):
            heading.append(f", {headers[i]} ").append_text(_as_text(cells[i][r]))
        grid = Table.grid(padding=(0, 2, 0, 0), pad_edge=False)
        for _ in range(per_line):
            grid.add_column(style="dim", no_wrap=True)
            grid.add_column(overflow="fold")
        pairs = [(Text(headers[i]), _as_text(cells[i][r])) for i in keys]
        for start in range(0, len(pairs), per_line):
            line = pairs[start:start + per_line]
            grid.add_row(*[cell for pair in line for cell in pair], *[""] * (2 * (per_line - len(line))))
        parts += [heading, Padding(grid, (0, 0, 0, 2))]
    return Group(*parts)


def _as_text(cell, style: str = "") -> Text:
    return cell if isinstance(cell, Text) else Text(str(cell), style=style)


def print_command(out: Console, command: str) -> None:
    """A command line to copy: one line whatever the width (a wrapped command pasted into a shell runs half of it)."""
    out.print(Text(command), soft_wrap=True, crop=False, no_wrap=True, overflow="ignore")


def progress_line(out: Console, message: str):
    """A status line on a terminal while something slow runs (loading models). Where ``out`` is not a terminal (a
    file, a pipe, a CI log), nothing if it ends within :data:`.phases.HEARTBEAT_S`, else a heartbeat line on stderr
    every :data:`.phases.HEARTBEAT_S` seconds (``vocabcheck: still loading the models (20 s)``), so that output stays
    what the command prints and a one-line error found while loading stays one line."""
    if out.is_terminal:
        return out.status(message)
    from . import phases

    return phases.phases(out if out.stderr else console(stderr=True), message, announce=False)


def discard_output(stream) -> None:
    """After a BrokenPipeError on ``stream`` (stdout or stderr): what is still buffered and whatever is written to it
    later goes to the null device, so neither a later write nor the flush at exit fails again."""
    try:
        fileno = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (AttributeError, OSError, ValueError):  # not a file (a test's StringIO): nothing to redirect
        return
    try:
        os.dup2(devnull, fileno)
    finally:
        os.close(devnull)


def _printable_text(text: Text) -> Text:
    plain = text.plain
    if printable(plain, _KEEP) is plain:
        return text
    pieces = [printable(char, _KEEP) for char in plain]
    offsets = [0]
    for piece in pieces:
        offsets.append(offsets[-1] + len(piece))
    clean = text.copy()
    clean.plain = "".join(pieces)
    clean.spans = [Span(offsets[min(span.start, len(plain))], offsets[min(span.end, len(plain))], span.style)
                   for span in text.spans]
    return clean


def pair_title(comparison: Comparison, width: int = 80) -> Text:
    """``TARGET (target) ← DRAFT (draft)``, each path shortened so that the line holds in a panel's title at
    ``width`` columns."""
    limit = max(12, (width - 4 - len(" (target) ←  (draft)")) // 2)
    target, draft = short_paths([comparison.target.spec, comparison.draft.spec], limit)
    return Text.assemble((target, "bold"), " (target) ← ", (draft, "bold"), " (draft)")


def verdict_text(verdict: Verdict) -> Text:
    return Text(verdict.value.upper(), style=VERDICT_STYLE[verdict])


def print_comparison(out: Console, comparison: Comparison, *, strict: bool = False, show_info: bool = True) -> None:
    head = Text.assemble(verdict_text(comparison.verdict), "  ", (comparison.reason, ""))
    if strict and comparison.verdict is not Verdict.INCOMPATIBLE and comparison.failed(strict=True):
        head.append("\n--strict: warnings fail this pair", style="bold yellow")
    out.print(Panel(head, title=pair_title(comparison, out.width), title_align="left", expand=True))
    print_findings(out, comparison.findings, show_info=show_info)
    out.print(alignment_line(comparison.alignment))
    translation = translation_line(comparison)
    if translation is not None:
        out.print(translation)
    print_table(out, side_by_side(comparison.target, comparison.draft, out.width), max_row_lines=3)


def print_findings(out: Console, findings: Iterable[Finding], *, show_info: bool = True) -> None:
    findings = list(findings)
    for severity in (Severity.ERROR, Severity.WARNING, Severity.INFO):
        group = [f for f in findings if f.severity is severity]
        if not group or (severity is Severity.INFO and not show_info):
            continue
        style, mark = SEVERITY_STYLE[severity]
        out.print(Text(f"{SEVERITY_TITLE[severity]} ({len(group)})", style=f"bold {style}"))
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=2, justify="right")
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for finding in group:
            grid.add_row(Text(mark, style=style), Text(finding.code, style=f"bold {style}"), finding.message)
        out.print(grid)


def alignment_line(alignment: Alignment) -> Text:
    keep = ", ".join(f"{a}–{b - 1}" for a, b in alignment.draft_keep_ranges()[:4]) or "none"
    text = Text("Alignment: ", style="bold")
    text.append(f"draft probabilities keep ids {keep} ({alignment.shared_ids:,} shared)")
    if alignment.mapping == "pad":
        text.append(f", padded with {alignment.pad_rows:,} zero rows to the target's {alignment.target_rows:,}")
    elif alignment.mapping == "cut":
        text.append(f", {alignment.cut_rows:,} draft rows cut to the target's {alignment.target_rows:,}")
    else:
        text.append(f", {alignment.target_rows:,} rows on both sides")
    lacks = alignment.substituted_ids()
    if lacks:
        span = ", ".join(f"{a}–{b - 1}" for a, b in lacks[:3])
        text.append(f"; target ids {span}, beyond the draft's rows, reach it as id {alignment.draft_substitute_id}")
    text.append(f" (rows from {alignment.rows_source})", style="dim")
    return text


def translation_line(comparison: Comparison) -> Text | None:
    """What a translated draft can propose, for tokenizers that differ (``None`` when they are equivalent)."""
    translation = comparison.diff.translation
    if translation is None:
        return None
    text = Text("Translation: ", style="bold")
    if not translation.translatable:
        text.append(f"not possible: {translation.reason}")
        return text
    mapped = [r.role for r in translation.roles if r.mapped]
    text.append(f"{translation.shared_tokens:,} shared tokens ({translation.target_share:.1%} of the target's regular "
                f"vocabulary, {translation.draft_share:.1%} of the draft's); roles mapped: "
                f"{', '.join(mapped) or 'none'}; {translation.target_unreachable_count:,} target ids unreachable")
    return text


def side_by_side(target: ModelProfile, draft: ModelProfile, width: int = 80) -> Table:
    table = Table(show_header=True, header_style="bold", expand=False, pad_edge=False)
    table.add_column("", max_width=16 if width < 100 else None)  # at 80 columns labels wrap, values keep words
    table.add_column("target", overflow="fold")
    table.add_column("draft", overflow="fold")
    for label, getter in ROWS:
        a, b = getter(target), getter(draft)
        if label == "model":  # room for two paths beside the labels at 80 columns
            a, b = short_paths([a, b], 28)
        style = None if a == b else "yellow"
        table.add_row(label, Text(a, style=style), Text(b, style=style))
    return table


def print_profile(out: Console, profile: ModelProfile) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    limit = max(24, out.width - 30)  # the value column of the panel, beside the longest label
    for label, getter in ROWS:
        table.add_row(label, short_path(getter(profile), limit) if label == "model" else getter(profile))
    table.add_row("add_bos_token (config)", _opt(profile.specials.config_add_bos))
    table.add_row("add_eos_token (config)", _opt(profile.specials.config_add_eos))
    for fact, where in sorted(profile.provenance.items()):
        table.add_row(f"from: {fact}", short_path(where, limit))
    title = Text(short_path(profile.spec, max(12, out.width - 6)), style="bold")
    out.print(Panel(table, title=title, title_align="left"))
    added = profile.tokenizer.added
    if added:
        tokens = Table(title=f"Added tokens ({len(added)})", header_style="bold", pad_edge=False)
        tokens.add_column("id")
        tokens.add_column("content", overflow="fold")
        tokens.add_column("flags (special, normalized, lstrip, rstrip, single_word)", overflow="fold")
        shown = added if len(added) <= 40 else added[:20] + added[-20:]
        for token in shown:
            tokens.add_row(str(token.id), repr(token.content),
                           ", ".join(name for name, value in token.flags().items() if value) or "—")
        if len(added) > 40:
            tokens.caption = f"{len(added) - 40:,} more not shown; --json lists them all"
        print_table(out, tokens)


def _special(token: SpecialToken | None) -> str:
    if token is None:
        return "—"
    return f"{token.content!r} ({token.id if token.id is not None else 'not in vocab'})"


def _opt(value) -> str:
    return "—" if value is None else str(value).lower()


def _rows(profile: ModelProfile) -> str:
    emb = profile.embeddings
    if emb.source == "unknown":
        return "unknown (no checkpoint)"
    if emb.source == "config":
        return f"{emb.input_rows:,} (config vocab_size; no checkpoint)"
    return f"{emb.input_rows:,} ({emb.input_tensor})" if emb.input_rows is not None else "—"


def _head(profile: ModelProfile) -> str:
    emb = profile.embeddings
    if emb.source != "tensors":
        return "unknown" if emb.source == "unknown" else f"{emb.output_rows:,} (config)"
    if emb.tied:
        return f"{emb.output_rows:,} (tied to the input embedding)"
    return f"{emb.output_rows:,} ({emb.output_tensor})"


def _tied(profile: ModelProfile) -> str:
    """Whether the output head is the input embedding: from the tensors (a lone embedding, or a config that says so
    beside both) or, without a checkpoint, from config.json's tie_word_embeddings."""
    emb = profile.embeddings
    if emb.tied is None:
        return "unknown"
    where = "tensors" if emb.source == "tensors" else "config tie_word_embeddings"
    return f"{'yes' if emb.tied else 'no'} ({where})"


def _ids(profile: ModelProfile) -> str:
    tok = profile.tokenizer
    return f"{tok.assigned:,} ({tok.regular_count:,} regular + {len(tok.added):,} added), max id {tok.size - 1:,}"


def _add(profile: ModelProfile, ids) -> str:
    if not ids:
        return "nothing"
    return ", ".join(f"{profile.tokenizer.token(i)!r} ({i})" for i in ids)


ROWS = (
    ("model", lambda p: f"{p.spec}" + (f" @ {p.revision[:12]}" if p.revision else "")),
    ("architecture", lambda p: p.architecture or "—"),
    ("tokenizer", lambda p: f"{p.tokenizer.model_type}, fingerprint {p.fingerprint[:16]}"),
    ("token ids", _ids),
    ("merges", lambda p: f"{len(p.tokenizer.merges):,}" if p.tokenizer.merges is not None else "—"),
    ("bos", lambda p: _special(p.specials.bos)),
    ("eos", lambda p: _special(p.specials.eos)),
    ("pad", lambda p: _special(p.specials.pad)),
    ("unk", lambda p: _special(p.specials.unk)),
    ("adds before a sequence", lambda p: _add(p, p.tokenizer.prefix_ids)),
    ("adds after a sequence", lambda p: _add(p, p.tokenizer.suffix_ids)),
    ("generation eos ids", lambda p: ", ".join(map(str, p.generation_eos)) or "—"),
    ("chat template", lambda p: f"{len(p.chat_template):,} characters" if p.chat_template else "—"),
    ("config vocab_size", lambda p: f"{p.config_vocab_size:,}" if p.config_vocab_size is not None else "—"),
    ("input embedding rows", _rows),
    ("lm_head rows", _head),
    ("lm_head tied", _tied),
)


# --- run --------------------------------------------------------------------------------------------------------


def print_refusal(out: Console, comparison: Comparison) -> None:
    """Why `run` refuses a pair: the verdict and its top findings (the error line that follows says what to do)."""
    out.print(Text.assemble(verdict_text(comparison.verdict), "  ", comparison.reason))
    print_findings(out, comparison.top_findings(3), show_info=False)


class StreamPrinter:
    """Prints one prompt's text as tokens are accepted (decoding the whole output each time keeps multi-byte
    characters that span tokens intact)."""

    def __init__(self, out: Console, profile: ModelProfile):
        self.out = out
        self.tokenizer = profile.source.tokenizer
        self.ids: list[int] = []
        self.shown = ""

    def on_tokens(self, row: int, ids: list[int]) -> None:
        self.ids.extend(ids)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):  # an incomplete UTF-8 sequence: wait for the next token
            return
        if text.startswith(self.shown):
            self.out.file.write(printable(text[len(self.shown):], _KEEP))
            self.out.file.flush()
            self.shown = text

    def finish(self) -> None:
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.startswith(self.shown):
            self.out.file.write(printable(text[len(self.shown):], _KEEP))
        self.out.file.write("\n")
        self.out.file.flush()


def print_texts(out: Console, session, result) -> None:
    for index, sequence in enumerate(result.sequences):
        prompt = sequence.prompt.text if sequence.prompt.text is not None else "(chat messages)"
        out.print(Text(f"[{index}] ", style="bold") + Text(prompt, style="dim") + Text(sequence.text))


KEPT_STATES = {  # -k auto's kept step costs (decode.metrics.KEPT_ORDER), as run says what became of them
    "none": "nothing kept for this pair on this machine",
    "used": "started from what an earlier run kept",
    "replaced": "what was kept disagreed with this run's steps: measured again",
    "discarded": "what was kept could not have been measured: set aside, measured again",
}


def print_metrics(out: Console, session, result) -> None:
    m = result.metrics
    table = Table(title="Speculative decoding" if Method(m.method).proposes else "Plain decoding", header_style="bold",
                  show_header=True, pad_edge=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("method", m.method + (f", k = {m.k}" if Method(m.method).proposes else "")
                  + (", translated through shared tokens" if m.translated else ""))
    if getattr(session, "engine", "vocabcheck") != "vocabcheck":
        table.add_row("engine", f"{session.engine} {session.engine_version}")
    table.add_row("device / dtype", f"{session.device} / {str(session.dtype).removeprefix('torch.')}")
    table.add_row("sequences / batch size", f"{len(result.sequences)} / {m.batch_size}")
    table.add_row("generated tokens", f"{m.generated:,}")
    if Method(m.method).proposes:
        table.add_row("drafted / accepted", f"{m.drafted:,} / {m.accepted:,}")
        table.add_row("acceptance rate", f"{m.acceptance_rate:.1%}")
        table.add_row("mean accepted length", f"{m.mean_accepted_length:.2f}")
        table.add_row("acceptance by position", " ".join(f"{a:.0%}" for a in m.acceptance_by_position))
        table.add_row("mean proposal length", f"{m.proposal_length:.2f}" + (" (chosen per step)" if m.k == "auto"
                                                                              else ""))
        table.add_row("steps without speculation", f"{m.plain_steps:,} of {m.verify_passes:,}")
        if m.kept_state is not None:
            table.add_row("kept step costs", f"{m.kept_state}: {KEPT_STATES[m.kept_state]}")
    if m.translated:
        table.add_row("tokens the draft could not propose", f"{m.outside_shared:,} ({m.outside_shared_share:.1%})")
        table.add_row("re-encodings per 100 tokens", f"{m.reencodings_per_100:.1f}")
    table.add_row("time to first token", f"{m.ttft_s * 1000:.1f} ms")
    table.add_row("time per output token", f"{m.tpot_ms:.2f} ms")
    table.add_row("tokens/s", f"{m.tokens_per_s:.1f}")
    if m.draft_s or m.target_s:
        table.add_row("time split", f"prefill {m.prefill_s:.2f} s · draft {m.draft_s:.2f} s · "
                                    f"target {m.target_s:.2f} s · other {m.other_s:.2f} s")
    print_table(out, table)
    if result.interrupted:
        out.print(Text("interrupted: the metrics cover what was generated so far", style="bold yellow"))
