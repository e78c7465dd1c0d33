"""`EvidenceGraphCallback`: LangGraph's interrupts and resumes, observed as
telemetry only. It never approves, rejects or records anything in bl: a
resume is not an approval."""

from __future__ import annotations

from typing import Any

try:
    from langgraph.callbacks import GraphCallbackHandler as _Base
except ImportError:  # LangGraph without graph callbacks, or not installed
    _Base = object  # type: ignore[assignment,misc]


class EvidenceGraphCallback(_Base):  # type: ignore[misc,valid-type]
    """Pass it in `config["callbacks"]`; `events` lists what it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    def on_interrupt(self, event: Any) -> None:
        self.events.append({
            "kind": "interrupt",
            "checkpoint_ns": list(getattr(event, "checkpoint_ns", ()) or ()),
            "interrupt_ids": [str(i.id) for i in getattr(event, "interrupts", ()) or ()],
        })

    def on_resume(self, event: Any) -> None:
        self.events.append({
            "kind": "resume",
            "checkpoint_ns": list(getattr(event, "checkpoint_ns", ()) or ()),
        })
