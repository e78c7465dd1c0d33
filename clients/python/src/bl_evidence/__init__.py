"""bl's evidence plane for agent apps: record each consequential decision,
its policy, a person's signed approval and an exactly-once tool call in
`bl evidence serve`, and verify it all offline with `bl verify`.

    from bl_evidence import CoreClient, LangGraphBridge
"""

from .bridge import CallCancelled, DispatchLease, LangGraphBridge
from .callback import EvidenceGraphCallback
from .client import Answer, CoreClient, EvidenceError, Refused, Unavailable, args_digest, canonical_json
from .lease import LeaseTimeout, SqliteDispatchLease

__all__ = [
    "Answer",
    "CallCancelled",
    "CoreClient",
    "DispatchLease",
    "EvidenceError",
    "EvidenceGraphCallback",
    "LangGraphBridge",
    "Refused",
    "LeaseTimeout",
    "SqliteDispatchLease",
    "Unavailable",
    "args_digest",
    "canonical_json",
]
