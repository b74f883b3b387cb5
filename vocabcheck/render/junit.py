"""JUnit XML for CI systems (GitHub Actions test reporters, GitLab, Jenkins, Azure): one testcase per gate pair.

The layout is the common JUnit/Ant one: ``<testsuites>`` with one ``<testsuite>`` per manifest, each pair a
``<testcase>``; an unmet expectation is one ``<failure>`` (every unmet expectation of the pair in its message, the
findings in its text), a pair whose model cannot be read is one ``<error>``; the findings of every evaluated pair are
in its ``<system-out>``.
"""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from datetime import datetime, timezone

from .. import __version__
from ..gate import GateReport, Outcome
from .gate_report import failure_text

# characters XML 1.0 cannot carry at all (control characters, lone surrogates, U+FFFE/U+FFFF)
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def gate_junit(report: GateReport) -> str:
    counts = {"tests": str(len(report.results)), "failures": str(report.count(Outcome.FAIL)),
              "errors": str(report.count(Outcome.ERROR)), "skipped": "0", "time": f"{report.seconds:.3f}"}
    manifest = str(report.manifest.path)
    suites = ET.Element("testsuites", {"name": "vocabcheck gate", **counts})
    suite = ET.SubElement(suites, "testsuite", {
        "name": _safe(f"vocabcheck gate {manifest}"), **counts,
        "timestamp": datetime.now(timezone.utc).replace(tzinfo=None, microsecond=0).isoformat(),
        "hostname": _safe(socket.gethostname() or "localhost"),
    })
    properties = ET.SubElement(suite, "properties")
    for name, value in (("manifest", manifest), ("vocabcheck_version", __version__),
                        ("models_profiled", str(report.models)), ("tokenizer_diffs", str(report.tokenizer_diffs))):
        ET.SubElement(properties, "property", {"name": name, "value": _safe(value)})
    classname = _safe(f"vocabcheck.gate.{report.manifest.path.stem}")
    for result in report.results:
        case = ET.SubElement(suite, "testcase", {"name": _safe(result.pair.name), "classname": classname,
                                                 "time": f"{result.seconds:.3f}"})
        if result.outcome is Outcome.FAIL:
            failure = ET.SubElement(case, "failure", {"message": _safe("; ".join(result.failures)),
                                                      "type": "vocabcheck.expectation"})
            failure.text = _safe(failure_text(result))
        elif result.outcome is Outcome.ERROR:
            line = result.error.one_line()
            error = ET.SubElement(case, "error", {"message": _safe(line), "type": type(result.error).__name__})
            error.text = _safe(line)
        header = (f"target: {result.pair.target} ({result.pair.target_spec})\n"
                  f"draft: {result.pair.draft} ({result.pair.draft_spec})\n"
                  f"expected: {result.pair.expect.describe()}{' (strict)' if result.pair.strict else ''}")
        out = ET.SubElement(case, "system-out")
        # a failure's text already lists the findings; a passing pair lists them here
        out.text = _safe(header + ("\n" + failure_text(result) if result.outcome is Outcome.PASS else ""))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _safe(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
