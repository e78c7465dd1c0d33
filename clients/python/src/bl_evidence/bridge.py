"""`LangGraphBridge`: StateGraph-native nodes that put bl's evidence plane
in front of a consequential tool call.

- `make_decision_node()` proposes the call (operation id, thread, identity,
  tool, the arguments' digest) and has the operator's policy decide it. If a
  person must approve, it pauses the graph with `interrupt()` before the
  action; on `Command(resume=...)` it asks bl whether a signed approval for
  this very interrupt was recorded. A resume value is never an approval.
- `make_guarded_node()` calls the tool only with bl's reservation, which is
  granted once: a node run again (a resume, a retry, a crash and restart)
  never calls the tool again. Anything unknown after the reservation gives
  `reconciliation_required`, and nothing is replayed.
- `make_guarded_call_node()` is the two nodes above as one, for a call
  made as soon as it is decided: one request fewer to bl, and one graph
  step fewer.
- `make_verify_node()` records what the outside system says happened.

Each node returns a state update under `state_key` (default `evidence`):
`{"operation_id", "tool", "args_digest", "status", ...}`, where `status` is
`cleared`, `blocked`, `rejected`, `executed`, `reconciliation_required`,
`abandoned` or `approval_expired` (docs/evidence.md says what each means).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import inspect
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any, Callable, ContextManager, Generator, Mapping, Protocol, cast

from .client import Answer, CoreClient, Refused, args_digest

State = Mapping[str, Any]
try:
    # LangGraph passes a node its config only when the parameter is typed so.
    from langchain_core.runnables import RunnableConfig
except ImportError:  # without LangGraph, a node is a plain function
    RunnableConfig = Mapping[str, Any]  # type: ignore[misc,assignment]
Config = RunnableConfig


class DispatchLease(Protocol):
    """Serialises dispatch of one operation across the app's processes."""

    def hold(self, operation_id: str) -> ContextManager[object]: ...


def _configurable(config: Config | None) -> Mapping[str, Any]:
    return (config or {}).get("configurable", {}) or {}


class LangGraphBridge:
    """Builds the nodes; `client` speaks to `bl evidence serve`, and
    `identity` is who the app acts for (the delegated identity).

    `dispatch_lease` serialises the reservation and the call across the
    app's processes; with `require_dispatch_lease=True` a bridge without one
    refuses to be built, so a deployment cannot forget it. `digest_key`
    keys the arguments' digests (see `args_digest`).
    """

    def __init__(self, client: CoreClient, *, identity: str, state_key: str = "evidence",
                 dispatch_lease: DispatchLease | None = None, require_dispatch_lease: bool = False,
                 digest_key: bytes | None = None):
        if require_dispatch_lease and dispatch_lease is None:
            raise ValueError("require_dispatch_lease=True, but no dispatch_lease= was given")
        if not identity or not identity.strip():
            raise ValueError("identity= is who the app acts for, and an approval is bound to it: it cannot be empty")
        self.client = client
        self.digest_key = digest_key
        self.identity = identity
        self.state_key = state_key
        self.dispatch_lease = dispatch_lease

    # -- the nodes -----------------------------------------------------------

    def make_decision_node(self, *, tool: str | Callable[[State], str],
                           args: Callable[[State], Mapping[str, Any]],
                           operation_id: Callable[[State, Config], str] | None = None,
                           approval_prompt: Callable[[State], Any] | None = None,
                           ) -> Callable[[State, Config], dict[str, Any]]:
        """The node that decides whether `tool` (a name, or a function of the
        state that gives one) may be called with `args(state)`. The operation id is `operation_id(state, config)`, or
        by default one made from the thread, the tool and the arguments'
        digest: the same call in the same thread is the same decision, so a
        node that runs again never makes a second one. Give `operation_id`
        when the same call may rightly happen twice in a thread."""

        def decide(state: State, config: RunnableConfig) -> dict[str, Any]:
            binding = self._binding(state, config, tool, args(state), operation_id)
            record, _ = self._decided(state, config, binding, approval_prompt, reserve=False)
            return {self.state_key: record}

        return decide

    def make_guarded_node(self, tool_fn: Callable[[Mapping[str, Any]], Any], *,
                          args: Callable[[State], Mapping[str, Any]],
                          result_key: str | None = None) -> Callable[[State, Config], Any]:
        """The node that calls `tool_fn(args(state))` at most once, with bl's
        reservation for exactly these arguments (changed arguments are
        refused: the decision was made for the old ones). Its return goes to
        `result_key` in the state, if given.

        An `async def` tool gives an async node (for `ainvoke`/`astream`),
        which awaits it; the dispatch lease and bl's requests run on a
        thread of the call's own, off the event loop. A tool that returns a
        coroutine or a generator nothing drives is refused once it has
        returned: bl records the call as failed (a person reconciles it),
        and the node raises `TypeError`. A node cancelled while it waits for
        the lease reserves nothing; cancelled during the call, bl is told
        whether the tool acted is unknown."""

        if _is_async(tool_fn):
            async def guarded_async(state: State, config: RunnableConfig) -> dict[str, Any]:
                # The lease and bl's requests may wait (another dispatch
                # holds the lease): they run on a thread of this call's own,
                # never on the event loop and never behind other calls'
                # waits, and in order, so what a cancel leaves to do runs
                # after what was under way.
                loop = asyncio.get_running_loop()
                worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bl-evidence-call")
                cancelled = threading.Event()
                steps = self._guarded_steps(state, args, result_key, cancelled)

                def on_worker(fn: Callable[..., Any], *fn_args: Any) -> Any:
                    return asyncio.shield(loop.run_in_executor(worker, fn, *fn_args))

                try:
                    try:
                        started = await on_worker(_start, steps)
                    except asyncio.CancelledError:
                        # Not reserved yet: it never will be. Reserved
                        # meanwhile: the call is recorded as never made
                        # (a person closes it), and the lease given back.
                        cancelled.set()
                        worker.submit(_not_called, steps)
                        raise
                    if not started[0]:
                        return cast("dict[str, Any]", started[1])
                    try:
                        result = await tool_fn(started[1])
                        if inspect.isawaitable(result) or inspect.isgenerator(result) or inspect.isasyncgen(result):
                            _discard(result)
                            raise _never_ran(tool_fn)
                    except asyncio.CancelledError:
                        # Cancelled half way: whether the tool acted is
                        # unknown; bl is told so, and a person says.
                        worker.submit(_finish, steps, (False, CallCancelled("cancelled during the call")))
                        raise
                    except Exception as error:  # it may have acted before it raised
                        update = await on_worker(_finish, steps, (False, error))
                        if isinstance(error, _NeverRan):
                            raise TypeError(str(error)) from None
                        return cast("dict[str, Any]", update)
                    return cast("dict[str, Any]", await on_worker(_finish, steps, (True, result)))
                finally:
                    worker.shutdown(wait=False)  # what was queued still runs

            return guarded_async

        def guarded(state: State, config: RunnableConfig) -> dict[str, Any]:
            return _run_sync(self._guarded_steps(state, args, result_key, None), tool_fn)

        return guarded

    def make_guarded_call_node(self, tool_fn: Callable[[Mapping[str, Any]], Any], *,
                               tool: str | Callable[[State], str],
                               args: Callable[[State], Mapping[str, Any]],
                               operation_id: Callable[[State, Config], str] | None = None,
                               approval_prompt: Callable[[State], Any] | None = None,
                               result_key: str | None = None) -> Callable[[State, Config], dict[str, Any]]:
        """The decision node and the guarded node as one node, for a call
        made as soon as it is decided: one request to bl proposes the call,
        has the policy decide it and, if it is cleared, takes the
        reservation, in one durable step; a second records the call's
        receipt. That is one request and one graph step fewer than the two
        nodes. The arguments (`tool`, `args`, `operation_id`,
        `approval_prompt`, `result_key`) and the state update are theirs.

        A call a person must approve pauses the graph at an `interrupt()`
        in this node, before anything is reserved; on resume the node runs
        again from the top, and bl, not the resume value, says whether it
        was approved. A node run again after its reservation never calls
        the tool again (`reconciliation_required`). The dispatch lease, if
        any, is held from the proposal to the receipt. The tool must be a
        plain function: for an `async def` tool, use the two nodes."""
        if _is_async(tool_fn):
            raise TypeError("make_guarded_call_node takes a plain (sync) tool; for an `async def` tool, "
                            "put make_decision_node before make_guarded_node")

        def call(state: State, config: RunnableConfig) -> dict[str, Any]:
            # Once: the tool is called with exactly the arguments reserved.
            call_args = args(state)
            binding = self._binding(state, config, tool, call_args, operation_id)
            lease = self.dispatch_lease.hold(binding[0]) if self.dispatch_lease else nullcontext()
            with lease:
                record, granted = self._decided(state, config, binding, approval_prompt, reserve=True)
                decided = {**state, self.state_key: record}
                return _run_sync(self._guarded_steps(decided, lambda _: call_args, result_key, None,
                                                     granted=granted, leased=True), tool_fn)

        return call

    def make_verify_node(self, observe: Callable[[State], Any] | None = None,
                         ) -> Callable[[State, Config], Any]:
        """The node after the call: `observe(state)` is the trusted host's
        look at the outside system, as a dict `{"external_ref": ...,
        "status": ..., "source": ...}` or a tuple `(external_ref, status,
        source)` of non-empty strings, or None when there is nothing to
        observe (an `async def` observe gives an async node). It is recorded
        as `outcome_observed`; bl never invents one, and anything else
        `observe` returns is refused (TypeError) before anything is
        recorded. The update carries where the decision stands in bl."""

        def observed(state: State) -> bool:
            decided = state.get(self.state_key) or {}
            return observe is not None and bool(decided.get("operation_id")) \
                and decided.get("status") == "executed"

        if observe is not None and _is_async(observe):
            async def verify_async(state: State, config: RunnableConfig) -> dict[str, Any]:
                seen = await observe(state) if observed(state) else None
                # bl's requests are made off the event loop.
                return await asyncio.to_thread(self._verified, state, seen)

            return verify_async

        def verify(state: State, config: RunnableConfig) -> dict[str, Any]:
            seen = observe(state) if observe is not None and observed(state) else None
            return self._verified(state, seen)

        return verify

    # -- what the nodes share -----------------------------------------------

    def _binding(self, state: State, config: Config | None, tool: str | Callable[[State], str],
                 call_args: Mapping[str, Any],
                 operation_id: Callable[[State, Config], str] | None) -> tuple[str, str, str, str]:
        """What a decision is bound to: its operation id, the thread, the
        tool's name and the digest of the call's arguments."""
        thread_id = _configurable(config).get("thread_id")
        thread = "" if thread_id is None else str(thread_id)
        name = tool(state) if callable(tool) else tool
        if not isinstance(name, str) or not name:
            raise ValueError(f"the node's tool= gave {name!r}: it must name the tool, as a string")
        digest = args_digest(call_args, self.digest_key)
        if operation_id is None and not thread:
            # The default id is the thread's, the tool's and the
            # arguments': with no thread, the same call anywhere would be
            # one decision, and a second request would never run.
            raise ValueError("no thread_id in config['configurable']: run the graph with "
                             "{'configurable': {'thread_id': ...}} (and a checkpointer), or give "
                             "the node (make_decision_node or make_guarded_call_node) an operation_id=")
        if _configurable(config).get(_CHECKPOINTER, _UNKNOWN) is None:
            # LangGraph says, in the node's config, that the graph has no
            # checkpointer: a pause for a person could never be resumed.
            raise ValueError("this graph has no checkpointer: compile it with one (graph.compile("
                             "checkpointer=InMemorySaver()), or SqliteSaver to survive a restart), so that "
                             "a pause for approval can be resumed; nothing was proposed")
        op = operation_id(state, config or {}) if operation_id else _default_operation_id(thread, name, digest)
        return op, thread, name, digest

    def _decided(self, state: State, config: Config | None, binding: tuple[str, str, str, str],
                 approval_prompt: Callable[[State], Any] | None, *, reserve: bool,
                 ) -> tuple[dict[str, Any], Answer | None]:
        """Proposes the call and, if a person must approve it, pauses for
        them; the decision's record, and the reservation this proposal was
        granted (with `reserve`, when the decision was cleared)."""
        from langgraph.types import interrupt

        op, thread, name, digest = binding
        answer = self.client.propose(operation_id=op, thread_id=thread, identity=self.identity,
                                     tool=name, args_digest=digest, reserve=reserve)
        # `called` says whether this run of the graph called the tool: the
        # guarded node sets it when it does. A decision found executed here
        # was executed before (the same call in the same thread).
        record = {"operation_id": op, "tool": name, "args_digest": digest, "called": False}
        policy = answer.policy or {}
        granted = answer.reservation
        if granted is not None:
            # Cleared, and reserved by this very request.
            return {**record, "status": "cleared", "reason": policy.get("reason", "")}, granted
        stage = "awaiting_approval" if answer.approval_expired else answer.stage
        # Pause for a person until bl holds a signed answer for the
        # interrupt the graph is paused at; a resume value alone is
        # never one (it may be stale: langgraph#8837).
        while stage == "awaiting_approval":
            namespace = str(_configurable(config).get("checkpoint_ns", ""))
            prompt = approval_prompt(state) if approval_prompt else None
            request = {"operation_id": op, "tool": name, "args_digest": digest,
                       "reason": policy.get("reason", ""), "prompt": prompt}
            try:
                interrupt(request)
            except BaseException as paused:
                interrupt_id = _interrupt_id(paused)
                if interrupt_id is not None:
                    self._request_approval(op, namespace, interrupt_id)
                raise
            stage = self._stage_after_resume(op)
        # The node's status is where bl says the decision stands.
        return {**record, "status": stage, "reason": policy.get("reason", "")}, None

    def _guarded_steps(self, state: State, args: Callable[[State], Mapping[str, Any]],
                       result_key: str | None, cancelled: threading.Event | None,
                       granted: Answer | None = None, leased: bool = False,
                       ) -> Generator[Mapping[str, Any], tuple[bool, Any], dict[str, Any]]:
        """The guarded node's work around the call, for a sync or an async
        node alike: it yields the arguments once the call is reserved, and
        is sent `(True, result)` or `(False, error)`; it returns the
        node's update. The dispatch lease is held across the call, unless
        the caller holds it (`leased`). `granted` is a reservation the
        caller's proposal was granted: the call needs no other."""
        decided = dict(state.get(self.state_key) or {})
        if not decided.get("operation_id"):
            raise ValueError(f"no decision in state[{self.state_key!r}]: put the node from make_decision_node "
                             "(of a bridge with the same state_key) before the guarded node, on every path to it")
        status = decided.get("status")
        if status not in ("cleared", "reserved"):
            return {self.state_key: decided}
        op, tool = decided["operation_id"], decided["tool"]
        call_args = args(state)
        lease = self.dispatch_lease.hold(op) if self.dispatch_lease and not leased else nullcontext()
        with lease:
            if cancelled is not None and cancelled.is_set():
                # The node was cancelled while it waited for the lease:
                # nothing is reserved.
                return {self.state_key: decided}
            if status == "reserved":
                # Reserved before this run began (by a process that is
                # gone, since the lease is ours), or by a proposal whose
                # answer was lost. Whether the tool ran is unknown, and it
                # is not run again.
                return {self.state_key: {**decided, **self._after_lost_reservation(op, None)}}
            try:
                if granted is None:
                    granted = self.client.reserve(op, tool=tool, args_digest=args_digest(call_args, self.digest_key))
            except Refused as refused:
                if refused.code == "RequestMismatch":
                    raise
                if refused.code == "ApprovalExpired":
                    # Route back to the decision node: it asks again.
                    return {self.state_key: {**decided, "status": "approval_expired"}}
                return {self.state_key: {**decided, **self._after_lost_reservation(op, refused)}}
            if granted.retry:
                return {self.state_key: {**decided, **self._after_lost_reservation(op, None)}}
            ok, result = yield call_args
            if not ok:
                error = result
                try:
                    self.client.executed(op, ok=False, detail=self._failure_detail(error))
                except Refused as refused:
                    # Sent again after a lost answer, it was recorded: the
                    # decision already awaits reconciliation.
                    if refused.code != "ReconciliationRequired":
                        raise
                return {self.state_key: {**decided, "status": "reconciliation_required", "called": True,
                                         "error": f"{type(error).__name__}: {error}"}}
            # The effect happened: a lost receipt leaves the decision
            # reserved, which bl turns into reconciliation_required.
            try:
                self.client.executed(op, ok=True, result_digest=_digest_of(result, self.digest_key))
            except Refused as refused:
                # A receipt sent again after a lost answer was recorded.
                if refused.code != "AlreadyExecuted":
                    raise
        update: dict[str, Any] = {self.state_key: {**decided, "status": "executed", "called": True}}
        if result_key:
            update[result_key] = result
        return update

    def _verified(self, state: State, seen: Any) -> dict[str, Any]:
        """Records what `observe` saw, if anything, and where the decision
        stands in bl."""
        decided = dict(state.get(self.state_key) or {})
        op = decided.get("operation_id")
        if not op:
            return {}
        if seen is not None:
            ref, status, source = _observation(seen)
            self.client.outcome(op, external_ref=ref, status=status, source=source)
            decided["outcome"] = {"external_ref": ref, "status": status, "source": source}
        standing = self.client.decision(op) or {}
        decided["stage"] = standing.get("stage")
        return {self.state_key: decided}

    def _request_approval(self, op: str, namespace: str, interrupt_id: str) -> None:
        try:
            self.client.request_approval(op, checkpoint_ns=namespace, interrupt_id=interrupt_id)
        except Refused as refused:
            # The same pause recorded before (a node run again) is fine.
            if refused.code != "RequestRepeated":
                raise

    def _stage_after_resume(self, op: str) -> str:
        # bl's rules hold that an approval answers the latest pause recorded
        # for the decision, which is this one.
        return (self.client.decision(op) or {}).get("stage", "created")

    def _after_lost_reservation(self, op: str, refused: Refused | None) -> dict[str, Any]:
        """The reservation was not granted now: it was granted before (the
        node ran again), or the decision was closed. The tool is not called;
        a reservation with no receipt needs a person."""
        standing = self.client.decision(op) or {}
        stage = standing.get("stage")
        if stage == "reserved":
            self._record_failure(op, "reserved before this node run (the node ran again, or an answer was lost); "
                                     "whether the tool ran is unknown")
            return {"status": "reconciliation_required"}
        if stage == "executed":
            return {"status": "executed"}
        if refused is not None and stage not in ("reconciliation_required", "abandoned", "rejected", "blocked"):
            raise refused
        return {"status": stage or "reconciliation_required"}

    def _failure_detail(self, error: Exception) -> str:
        """What bl is told of a tool's failure: its type and message, or,
        with a digest key, its type and a keyed digest of the message
        (which may quote the arguments)."""
        if self.digest_key is None:
            return f"{type(error).__name__}: {error}"
        return f"{type(error).__name__}: {_digest_of(str(error), self.digest_key)}"

    def _record_failure(self, op: str, cause: str) -> None:
        try:
            self.client.reconciliation_required(op, cause)
        except Refused as refused:
            if refused.code != "ReconciliationRequired":
                raise


Steps = Generator[Mapping[str, Any], tuple[bool, Any], dict[str, Any]]


class CallCancelled(Exception):
    """The node was cancelled while its tool was being awaited."""


class _NeverRan(Exception):
    """The tool gave back a coroutine or generator that nothing drives."""


def _never_ran(tool_fn: Any) -> _NeverRan:
    return _NeverRan(f"the tool {getattr(tool_fn, '__name__', tool_fn)!r} returned an awaitable or a generator, "
                     "which is never run: an async tool must be `async def` and await its work, under "
                     "ainvoke/astream; a sync one must do its work before it returns")


def _discard(result: Any) -> None:
    close = getattr(result, "close", None) or getattr(result, "aclose", None)
    if callable(close):
        try:
            outcome = close()
            if inspect.iscoroutine(outcome):
                outcome.close()
        except Exception:  # closing what never ran must not hide the refusal
            pass


def _is_async(fn: Any) -> bool:
    """An `async def` function, or an object whose `__call__` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


def _run_sync(steps: Steps, tool_fn: Callable[[Mapping[str, Any]], Any]) -> dict[str, Any]:
    """Runs a guarded call's steps around a plain tool: its update."""
    try:
        started = _start(steps)
        if not started[0]:
            return cast("dict[str, Any]", started[1])
        try:
            result = tool_fn(started[1])
        except Exception as error:  # it may have acted before it raised
            return _finish(steps, (False, error))
        if inspect.isawaitable(result) or inspect.isgenerator(result) or inspect.isasyncgen(result):
            # A coroutine or generator never driven never ran: bl must not
            # record a call that did not happen as executed.
            _discard(result)
            refused = _never_ran(tool_fn)
            _finish(steps, (False, refused))
            raise TypeError(str(refused))
        return _finish(steps, (True, result))
    finally:
        # Whatever happened, the lease is given back (closing a finished
        # generator does nothing).
        steps.close()


def _start(steps: Steps) -> tuple[bool, Any]:
    """Runs the guarded node's steps up to the call: `(True, arguments)`
    once it is reserved, or `(False, update)` when there is no call."""
    try:
        return True, next(steps)
    except StopIteration as done:
        return False, done.value


def _finish(steps: Steps, outcome: tuple[bool, Any]) -> dict[str, Any]:
    """Sends the call's outcome to the guarded node's steps; their update."""
    try:
        steps.send(outcome)
    except StopIteration as done:
        update: dict[str, Any] = done.value
        return update
    raise AssertionError("the guarded steps yield once")


def _not_called(steps: Steps) -> None:
    """After a cancel during the reservation: if it was granted, the call
    is recorded as not made (a person closes it) and the lease given
    back."""
    if inspect.getgeneratorstate(steps) == inspect.GEN_SUSPENDED:
        _finish(steps, (False, CallCancelled("cancelled after the reservation; the tool was not called")))


# Where LangGraph puts a node's checkpointer in its config (None: the graph
# has none); `langgraph.constants.CONFIG_KEY_CHECKPOINTER`, named here so
# the bridge imports nothing of LangGraph's until a node runs.
_CHECKPOINTER = "__pregel_checkpointer"
_UNKNOWN = object()

_OBSERVED = ("external_ref", "status", "source")


def _observation(seen: Any) -> tuple[str, str, str]:
    """`observe`'s answer as (external_ref, status, source): a dict with
    those three keys, or a tuple or list of three, each a non-empty string.
    Anything else is refused rather than guessed at: unpacking a dict or a
    string would record its keys or its letters as an outcome."""
    if isinstance(seen, Mapping):
        missing = [key for key in _OBSERVED if key not in seen]
        extra = sorted(str(key) for key in seen if key not in _OBSERVED)
        if missing or extra:
            raise TypeError(f"observe() gave a dict with keys {sorted(map(str, seen))}: it needs exactly "
                            f"{list(_OBSERVED)} (missing {missing}, unknown {extra}); nothing was recorded")
        values = tuple(seen[key] for key in _OBSERVED)
    elif isinstance(seen, (tuple, list)) and len(seen) == 3:
        values = tuple(seen)
    else:
        raise TypeError(f"observe() gave {seen!r}: return a dict with {list(_OBSERVED)}, a tuple "
                        "(external_ref, status, source), or None when there is nothing to observe; "
                        "nothing was recorded")
    for key, value in zip(_OBSERVED, values):
        if not isinstance(value, str) or not value:
            raise TypeError(f"observe() gave {key}={value!r}: each of {list(_OBSERVED)} must be a "
                            "non-empty string; nothing was recorded")
    return cast(tuple[str, str, str], values)


def _default_operation_id(thread: str, tool: str, digest: str) -> str:
    return "op-" + hashlib.sha256(f"{thread}\n{tool}\n{digest}".encode()).hexdigest()[:32]


def _interrupt_id(paused: BaseException) -> str | None:
    """The id LangGraph gave the interrupt that paused the node."""
    interrupts = paused.args[0] if paused.args else ()
    try:
        return str(interrupts[0].id)
    except (TypeError, IndexError, AttributeError):
        return None


def _digest_of(result: Any, key: bytes | None) -> str:
    """A digest of what the tool returned, keyed like the arguments' (a
    result often repeats them)."""
    try:
        text = repr(result)
    except Exception:  # a result that cannot say what it is
        text = type(result).__name__
    if key is None:
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return "hmac-sha256:" + hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
