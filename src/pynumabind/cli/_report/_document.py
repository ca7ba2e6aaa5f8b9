"""The report as values: its sections, its cross-checks, its JSON form, its exit status (pure).

Nothing here reads the machine; :mod:`._gather` fills these values and
:mod:`._text` writes them.  The JSON document (``pynumabind report --json``)
is :meth:`Report.to_dict`::

    {
      "schema": 2,                    # the package's one JSON schema number
      "document": "report",
      "pynumabind": "1.2.3",
      "created": "2026-05-01T12:00:00Z",
      "host": "gpu-node-17",          # "<host>" with --redact
      "redacted": false,
      "exit_status": 0,               # 0 all agree, 1 a disagreement or a failure
      "summary": {"agree": 9, "disagree": 0, "not applicable": 4,
                  "failed_sections": [], "failed_checks": []},
      "cross_checks": [{"name": ..., "subject": ..., "verdict": ..., "detail": ...}],
      "sections": {NAME: {"title": ..., "status": "ok" | "failed" | "skipped",
                          "reason": null | "why it failed or was skipped",
                          "traceback": null | "where it failed",
                          "data": {...}}}
    }

``sections`` holds every name of :data:`SECTIONS`, in that order, whatever
happened to each; a verdict is one of :data:`VERDICTS`.  A section's
``data`` keys are listed in the documentation (``docs/site/report.md``); a
new key is added without changing the schema number, as for every document
of the package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

__all__ = [
    "AGREE",
    "DISAGREE",
    "FAILED",
    "NOT_APPLICABLE",
    "OK",
    "SECTIONS",
    "SKIPPED",
    "VERDICTS",
    "Check",
    "Report",
    "Section",
]

AGREE = "agree"
DISAGREE = "disagree"
NOT_APPLICABLE = "not applicable"

#: Every verdict a cross-check can give.
VERDICTS = (AGREE, DISAGREE, NOT_APPLICABLE)

OK = "ok"
FAILED = "failed"
SKIPPED = "skipped"

#: The sections, in the order the report holds them: (name, title).
SECTIONS: Tuple[Tuple[str, str], ...] = (
    ("versions", "Versions"),
    ("machine", "The machine, as discovery sees it"),
    ("environment", "Environment variables"),
    ("limits", "This process's limits (affinity, cgroups, cpuset)"),
    ("kernel", "Kernel settings"),
    ("plans", "Plans, one per local rank"),
    ("nvidia_smi", "nvidia-smi topo -m"),
    ("check", "pynumabind check"),
    ("advise", "pynumabind advise --quick"),
    ("log", "Messages logged while the report was made"),
)


@dataclass(frozen=True)
class Check:
    """One cross-check: ``name`` (what is compared), ``subject`` (a GPU, a rank, ``machine``)."""

    name: str
    subject: str
    verdict: str
    detail: str

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {', '.join(VERDICTS)}")

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "subject": self.subject,
            "verdict": self.verdict,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Section:
    """One section: its data (JSON) and its text lines, or why it has none."""

    name: str
    status: str = OK
    data: Dict[str, Any] = field(default_factory=dict)
    lines: Tuple[str, ...] = ()
    reason: Optional[str] = None
    traceback: Optional[str] = None

    @property
    def title(self) -> str:
        return dict(SECTIONS)[self.name]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "title": self.title,
            "status": self.status,
            "reason": self.reason,
            "traceback": self.traceback,
            "data": self.data,
        }


@dataclass(frozen=True)
class Report:
    """Everything ``pynumabind report`` found: sections by name, then the cross-checks."""

    version: str
    created: str
    host: str
    sections: Tuple[Section, ...]
    checks: Tuple[Check, ...]
    redacted: bool = False
    #: Cross-checks that raised instead of giving verdicts: ``"name: Error: message"``.
    failed_checks: Tuple[str, ...] = ()

    def section(self, name: str) -> Section:
        return next(s for s in self.sections if s.name == name)

    @property
    def failed_sections(self) -> List[str]:
        return [s.name for s in self.sections if s.status == FAILED]

    @property
    def disagreements(self) -> List[Check]:
        return [c for c in self.checks if c.verdict == DISAGREE]

    @property
    def exit_status(self) -> int:
        """0 when nothing disagrees and every section and cross-check was made; 1 otherwise."""
        return 1 if self.disagreements or self.failed_sections or self.failed_checks else 0

    def counts(self) -> Dict[str, int]:
        return {verdict: sum(c.verdict == verdict for c in self.checks) for verdict in VERDICTS}

    def to_dict(self, schema: int) -> Dict[str, Any]:
        """The JSON document (see the module docstring); ``schema`` is the package's number."""
        return {
            "schema": schema,
            "document": "report",
            "pynumabind": self.version,
            "created": self.created,
            "host": self.host,
            "redacted": self.redacted,
            "exit_status": self.exit_status,
            "summary": {
                **self.counts(),
                "failed_sections": self.failed_sections,
                "failed_checks": list(self.failed_checks),
            },
            "cross_checks": [c.to_dict() for c in self.checks],
            "sections": {s.name: s.to_dict() for s in self.sections},
        }
