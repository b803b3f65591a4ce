"""The canary analysis: the canary's measured load against its class's baseline, a verdict.

Figures in (fleet.tune.measure's load on the canary; the baseline: a make tune record's, or the same load
on the canary before its turn), a verdict out; no I/O. tasks/rolling.py measures and acts on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.spec import Canary, ClassSpec, DDTree, NoSpeculation
from fleet.tune.search import PROMPTS, Level
from fleet.tune.measure import Load

RECORD_SOURCE = "make tune record"
BEFORE_SOURCE = "the same load on the canary before its turn (the old spec)"


@dataclass(frozen=True)
class Figures:
    """What one measured load says: output tokens/s as the client saw them, SGLang's accept length (None: the
    counters said none), and its requests and failures."""

    tokens_per_s: float
    accept_length: float | None
    requests: int
    failed: int = 0

    @classmethod
    def of(cls, lv: Level) -> Figures:
        return cls(lv.tokens_per_s, lv.accept_length, lv.requests, lv.failed)

    def describe(self) -> str:
        accept = "no accept length" if self.accept_length is None else f"accept length {self.accept_length:.2f}"
        return f"{self.tokens_per_s:.1f} tok/s, {accept}"


@dataclass(frozen=True)
class Baseline:
    figures: Figures
    source: str  # where the figures come from, in the operator's words
    unlike: str = ""  # why its accept length is no measure of the new spec's (it drafts otherwise); '' if it is


@dataclass(frozen=True)
class Analysis:
    passed: bool
    summary: str  # the figures, the baseline's and its source, the bounds: the summary's line


def load(c: Canary, spec: ClassSpec) -> Load:
    """The analysis's load: the class's canary settings, make tune's prompts."""
    return Load(c.requests, c.concurrency, c.max_tokens, tuple(spec.tune.prompts or PROMPTS), c.timeout_s)


def judged(spec: ClassSpec, hosts: int, mid_change: bool) -> bool:
    """Whether this canary is analysed: declared on, peers that follow it, a turn that starts from a host serving
    what it did (a host left mid-change by a killed run has no old spec to measure, and is taken over at once)."""
    return spec.canary.analysis and hosts > 1 and not mid_change


def from_record(record: object, spec: ClassSpec, group: str, concurrency: int, path: str) -> Baseline | None:
    """The make tune record's figures for the spec's block size (and tree budget) at `concurrency`, where the record
    is this class's, of the same target and algorithm, and that candidate served every request there; else None."""
    s = spec.speculative
    if not isinstance(record, dict) or isinstance(s, NoSpeculation) or not hasattr(s, "block_size"):
        return None
    if (record.get("class"), record.get("target"), record.get("algorithm")) != (group, spec.target_path, s.algorithm):
        return None
    wanted = {"block_size": s.block_size, **({"tree_budget": s.tree_budget} if isinstance(s, DDTree) else {})}
    for c in record.get("candidates") if isinstance(record.get("candidates"), list) else []:
        if not isinstance(c, dict) or c.get("candidate") != wanted or c.get("deployed") is not True:
            continue
        for lv in c.get("levels") if isinstance(c.get("levels"), list) else []:
            if not isinstance(lv, dict) or lv.get("concurrency") != concurrency or lv.get("failed") != 0:
                continue
            tps, accept, n = lv.get("tokens_per_s"), lv.get("accept_length"), lv.get("requests")
            if not _positive(tps) or not (accept is None or _positive(accept)) or type(n) is not int or n < 1:
                continue
            where = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in wanted.items())
            return Baseline(Figures(float(tps), None if accept is None else float(accept), n),
                            f"{RECORD_SOURCE} {path} ({where}, concurrency {concurrency})")
    return None


def _positive(v: object) -> bool:
    return type(v) in (int, float) and 0 < v < float("inf")


# The flags that name the drafter, not how much it drafts: a new drafter's accept length is held against the old one's.
DRAFTER_FLAGS = ("--speculative-draft-model-path", "--speculative-draft-model-revision")


def drafting(argv: list[str] | tuple[str, ...]) -> dict[str, str]:
    """How a server's command line drafts: its --speculative-* flags (the algorithm, the draft length, the tree)
    but those naming the drafter; {} when it does not speculate."""
    out, args = {}, list(argv)
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if flag.startswith("--speculative-") and flag not in DRAFTER_FLAGS:
            nxt = args[i + 1] if i + 1 < len(args) else ""
            out[flag] = value if eq else ("" if nxt.startswith("--") else nxt)
    return out


def before_turn(lv: Level | None, old_argv: tuple[str, ...] | None, new_argv: list[str]) -> Baseline | None:
    """The load on the canary before its turn as the baseline: one with a failed request or no tokens is none. Its
    accept length is the new spec's measure only where the old server drafted as the new one does (the same
    algorithm and draft length: a new drafter, engine or target); a shorter draft accepts less by design."""
    if lv is None or lv.failed or lv.tokens_per_s <= 0:
        return None
    if old_argv is None:
        return Baseline(Figures.of(lv), BEFORE_SOURCE, "the old server's command line unknown")
    old, new = drafting(old_argv), drafting(new_argv)
    if old != new:
        changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        return Baseline(Figures.of(lv), BEFORE_SOURCE, f"the old spec drafts otherwise ({', '.join(changed)})")
    return Baseline(Figures.of(lv), BEFORE_SOURCE)


def unmeasured(why: str) -> Analysis:
    """The canary's load said nothing readable: it is not taken for a good canary."""
    return Analysis(False, f"canary analysis: its load could not be measured: {why}")


def judge(canary: Figures, baseline: Baseline | None, c: Canary, speculative: bool, metrics: bool) -> Analysis:
    """The verdict on the canary's figures. speculative: the new spec decodes speculatively (its accept length is
    judged); metrics: SGLang's /metrics is on (its counters give the accept length). Failed requests fail it; no
    baseline passes it, saying so; a spec without speculation (or without metrics) is judged by tokens/s alone."""
    if canary.failed:
        return Analysis(False, f"canary analysis: {canary.failed} of {canary.requests} requests of its load failed")
    if baseline is None:
        return Analysis(True, f"canary analysis: {canary.describe()}; not compared: no baseline (no make tune record "
                        "for this spec at this concurrency, and no load served by the old spec before its turn)")
    base = baseline.figures
    against = (f"{canary.describe()} against the baseline's {base.describe()} ({baseline.source}); bounds: "
               f"{c.min_tokens_per_s:g} x its tok/s")
    problems = []
    if canary.tokens_per_s < c.min_tokens_per_s * base.tokens_per_s:
        problems.append(f"{canary.tokens_per_s:.1f} tok/s below {c.min_tokens_per_s:g} x {base.tokens_per_s:.1f} = "
                        f"{c.min_tokens_per_s * base.tokens_per_s:.1f}")
    notes = []
    if not speculative:
        notes.append("no speculation: tokens/s alone")
    elif not metrics:
        notes.append("service.enable_metrics false: tokens/s alone")
    elif canary.accept_length is None:
        problems.append("no accept length: SGLang counted no verify step (speculation did not run)")
    elif baseline.unlike:
        notes.append(f"{baseline.unlike}: tokens/s alone")
    elif base.accept_length is None:
        notes.append("the baseline had no accept length: tokens/s alone")
    else:
        against += f", {c.min_accept_length:g} x its accept length"
        floor = c.min_accept_length * base.accept_length
        if canary.accept_length < floor:
            problems.append(f"accept length {canary.accept_length:.2f} below {c.min_accept_length:g} x "
                            f"{base.accept_length:.2f} = {floor:.2f}")
    tail = f" ({'; '.join(notes)})" if notes else ""
    if problems:
        return Analysis(False, f"canary analysis failed: {'; '.join(problems)}: {against}{tail}")
    return Analysis(True, f"canary analysis passed: {against}{tail}")
