"""`make tune`: which draft length serves a class best, measured on one of its hosts. Plain decisions over
plain data (ops/tune.py does the talking): the candidates and the refusals, a candidate's spec, the figures
of one measured concurrency, the winners, the record, and the group_data change it recommends.

The knob is the one the engine has: DFLASH's block size (1..16, SGLang's bound), and for DDTREE the tree
budget too. Each candidate is deployed by the deploy itself, given as a run intent (fleet/rollout/intent.py: the
candidate an overlay, kept out of its gateway, its backup set dropped, its record a tune's; render, restart,
gate, smoke test, its own rollback), then measured with fleet/tune/measure.py's load at each concurrency; the next
run without an overlay (the tune's last step, or any make deploy after a tune was cut off) returns the host
to its declared spec.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field

from fleet.core import controller
from fleet.core.outcome import RecordKind
from fleet.spec import TUNE_BLOCK_SIZES, ClassSpec, DDTree, DFlash, Tune, is_loopback
from pydantic import ValidationError

from fleet.core.wire import Unreadable, clipped, excerpt, load_json

RECORDS_DIR = "tuning"  # in the repo, beside group_data: a record is reviewed and committed like a spec change
RECORD_VERSION = 1
MAX_BLOCK_SIZE, MAX_TREE_BUDGET = 16, 1024  # SGLang's bounds (fleet.spec.DFlash, DDTree)

# The shipped workload's prompts: kinds whose accept lengths differ (prose, code, reasoning, chat).
PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Write a Python function that merges two sorted lists, with a docstring and tests.",
    "Explain step by step why the sum of the first n odd numbers is n squared.",
    "What are three good questions to ask at the end of a job interview, and why?",
    "Summarize the causes of the French Revolution in one paragraph.",
    "Implement a thread-safe LRU cache in Go and explain its locking.",
    "A train leaves at 9:40 and arrives at 13:05. How long is the trip? Show your work.",
    "Give me a packing list for a three-day hike in the mountains in autumn.",
)


@dataclass(frozen=True)
class Candidate:
    block_size: int
    tree_budget: int | None = None  # DDTREE only

    def describe(self) -> str:
        return f"block size {self.block_size}" + (f", tree budget {self.tree_budget}" if self.tree_budget else "")

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def candidate_spec(spec: ClassSpec, c: Candidate) -> ClassSpec:
    """The declared spec with the candidate's knobs; ValueError where the algorithm or a bound refuses them."""
    s = spec.speculative
    if not isinstance(s, (DFlash, DDTree)):
        raise ValueError(f"speculative.algorithm {s.algorithm} has no block size to tune")
    if (c.tree_budget is not None) != isinstance(s, DDTree):
        raise ValueError("a tree budget is tuned with DDTREE only, and always with it")
    try:
        return ClassSpec.model_validate({**spec.model_dump(), "speculative": {**s.model_dump(), **c.to_json()}})
    except ValidationError as e:
        first = e.errors()[0]
        raise ValueError(f"{c.describe()}: {first['loc'][-1]}: {first['msg']}") from None


def candidates(spec: ClassSpec, block_sizes: list[int] | None = None,
               tree_budgets: list[int] | None = None) -> tuple[list[Candidate], list[str]]:
    """The candidates (command line over tune.* over the defaults) and what is wrong with them."""
    s, t = spec.speculative, spec.tune
    if not isinstance(s, (DFlash, DDTree)):
        return [], [f"speculative.algorithm: expected DFLASH or DDTREE (the algorithms with a block size), found "
                    f"{s.algorithm}: nothing to tune"]
    declared = s.block_size
    sizes = block_sizes or t.block_sizes or sorted({b for b in TUNE_BLOCK_SIZES if b <= declared} | {declared})
    problems = [f"block size {b}: expected 1..{MAX_BLOCK_SIZE} (SGLang's bound), found {b}"
                for b in sizes if not 1 <= b <= MAX_BLOCK_SIZE]
    budgets: list[int | None] = [None]
    if isinstance(s, DDTree):
        declared_budget = s.tree_budget  # by default half of it, it and twice it: the tree's width is the other knob
        budgets = list(tree_budgets or t.tree_budgets
                       or {max(1, declared_budget // 2), declared_budget, min(MAX_TREE_BUDGET, declared_budget * 2)})
        problems += [f"tree budget {b}: expected 1..{MAX_TREE_BUDGET} (SGLang's bound), found {b}"
                     for b in budgets if not 1 <= b <= MAX_TREE_BUDGET]
    elif tree_budgets:
        problems.append(f"tree budgets: {s.algorithm} has none (DDTREE only)")
    return [Candidate(b, g) for b in sorted(set(sizes)) for g in sorted(set(budgets), key=lambda x: x or 0)], problems


def refusals(host: str, spec: ClassSpec, problems: list[str], gateway: str | None, replicas: int) -> list[str]:
    """Why the tune may not start on `host`, each naming it; [] if it may. gateway: the gateway host
    routing the class, if any; replicas: the class's hosts behind it."""
    out = [f"{host}: tune: {p}" for p in problems]
    if not spec.service.enable_metrics:
        out.append(f"{host}: tune: service.enable_metrics: expected true (the accept length and generation "
                   "throughput come from SGLang's /metrics), found false")
    if is_loopback(spec.service.host):  # else: a restart per candidate, then every measuring request refused
        out.append(f"{host}: tune: service.host: expected an address the controller reaches (the workload is "
                   f"streamed straight to the host, also behind a gateway), found {spec.service.host} (loopback: "
                   "only the host itself reaches it)")
    if gateway is not None and replicas < 2:
        out.append(f"{host}: tune: its class is behind gateway {gateway} with {replicas} replica: expected at "
                   "least 2 (a peer serves while this one is tuned)")
    return out


def workload(t: Tune) -> dict:
    """The fixed workload, as hashed into the record: the same hash, the same requests."""
    return {"prompts": list(t.prompts or PROMPTS), "max_tokens": t.max_tokens, "rounds": t.rounds,
            "min_requests": t.min_requests, "concurrency": list(t.concurrency), "stream": True}


def workload_sha256(t: Tune) -> str:
    return hashlib.sha256(json.dumps(workload(t), sort_keys=True).encode()).hexdigest()


def percentile(values: list[float], p: float) -> float | None:
    """The nearest-rank p-th percentile (0 < p <= 100) of `values`; None when there are none."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] if ordered else None


@dataclass
class Level:
    """One candidate at one concurrency."""

    concurrency: int
    requests: int
    failed: int
    output_tokens: int
    wall_s: float
    tokens_per_s: float  # output tokens of the ok requests / wall time, as the client saw them
    latency_p50_s: float | None
    latency_p90_s: float | None
    latency_p99_s: float | None
    ttft_p50_s: float | None  # time to the first token
    accept_length: float | None  # SGLang's: generation tokens / verify calls over the level (/metrics counters)
    gen_throughput: float | None  # SGLang's sglang:gen_throughput at the level's end, tokens/s
    errors: list[str] = field(default_factory=list)  # the first distinct failures


NOT_SENT = "not sent: the level's requests outlasted tune.level_timeout_s"


def level(concurrency: int, results: list[tuple[float, bool, int, float | None, str]], wall_s: float,
          before: dict[str, float], after: dict[str, float], planned: int = 0) -> Level:
    """results: (latency_s, ok, output tokens, time to first token, error) per request; before and after:
    the host's /metrics (fleet.rollout.status.parse_metrics) around the level; planned: the requests it was to
    send, those never sent (its time ran out) counting as failed."""
    results = results + [(0.0, False, 0, None, NOT_SENT)] * max(0, planned - len(results))
    ok = [r for r in results if r[1]]
    tokens = sum(r[2] for r in ok)
    made = after.get("sglang:generation_tokens_total", 0) - before.get("sglang:generation_tokens_total", 0)
    steps = after.get("sglang:spec_verify_calls_total", 0) - before.get("sglang:spec_verify_calls_total", 0)
    accept = round(made / steps, 3) if steps > 0 else after.get("sglang:spec_accept_length")
    lat = [r[0] for r in ok]
    ttft = [r[3] for r in ok if r[3] is not None]
    errors = list(dict.fromkeys(r[4] for r in results if not r[1]))[:3]
    return Level(concurrency, len(results), len(results) - len(ok), tokens, round(wall_s, 3),
                 round(tokens / wall_s, 2) if wall_s > 0 else 0.0, *(_rounded(percentile(v, p)) for v, p in
                                                                    ((lat, 50), (lat, 90), (lat, 99), (ttft, 50))),
                 accept, after.get("sglang:gen_throughput"), errors)


def _rounded(seconds: float | None) -> float | None:
    """Seconds to the millisecond: the record is read by people."""
    return None if seconds is None else round(seconds, 3)


@dataclass
class Result:
    """One candidate: deployed and measured, or why not."""

    candidate: Candidate
    deployed: bool
    reason: str = ""  # why it was not deployed or not measured
    levels: list[Level] = field(default_factory=list)

    def at(self, concurrency: int) -> Level | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)


def _scored(r: Result, concurrency: int, p99_bound: float | None = None) -> float | None:
    lv = r.at(concurrency)
    if not r.deployed or lv is None or lv.failed or not lv.requests:
        return None  # a failed request disqualifies: fast and wrong is not a winner
    if p99_bound is not None and (lv.latency_p99_s is None or lv.latency_p99_s > p99_bound):
        return None
    return lv.tokens_per_s


def winner(results: list[Result], concurrency: int, p99_bound: float | None = None) -> Candidate | None:
    """The candidate with the most output tokens/s at `concurrency` and no failed request (and p99 within
    the bound, if one); ties go to the smaller block size (less work per step)."""
    scored = [(s, r.candidate) for r in results if (s := _scored(r, concurrency, p99_bound)) is not None]
    if not scored:
        return None
    return max(scored, key=lambda x: (x[0], -x[1].block_size, -(x[1].tree_budget or 0)))[1]


def change(spec: ClassSpec, best: Candidate) -> dict[str, int]:
    """The speculative keys the winner changes ({} when the class declares it already)."""
    s = spec.speculative
    now = {"block_size": s.block_size, **({"tree_budget": s.tree_budget} if isinstance(s, DDTree) else {})}
    return {k: v for k, v in best.to_json().items() if now.get(k) != v}


def describe_change(spec: ClassSpec, changed: dict[str, int]) -> str:
    if not changed:
        return "none: the class declares the winner already"
    return "; ".join(f"speculative.{k}: {getattr(spec.speculative, k)} -> {v}" for k, v in changed.items())


def record(*, host: str, group: str, spec: ClassSpec, gpus: str, engine: str, weights: str, source: str,
           results: list[Result], started: int, ended: int, by: str, finished: bool) -> dict:
    """The tuning record (tuning/<class>.json): what was measured where, every figure, and the winners."""
    t = spec.tune
    # a sweep cut off keeps its figures but names no winner: a candidate it never reached may have been better
    per = {str(c): (w.to_json() if finished and (w := winner(results, c)) else None) for c in t.concurrency}
    best = winner(results, t.objective, t.p99_latency_s) if finished else None
    s = spec.speculative
    return {
        "version": RECORD_VERSION, "class": group, "host": host, "gpus": gpus, "engine": engine,
        "target": spec.target_path, "draft": spec.draft_path, "weights": weights,
        "algorithm": s.algorithm, "declared": {"block_size": getattr(s, "block_size", None),
                                               **({"tree_budget": s.tree_budget} if isinstance(s, DDTree) else {})},
        "figures_from": source, "workload_sha256": workload_sha256(t), "workload": workload(t),
        "objective": {"concurrency": t.objective, "p99_latency_s": t.p99_latency_s},
        "started": started, "ended": ended, "by": by, "finished": finished,
        "candidates": [{"candidate": r.candidate.to_json(), "deployed": r.deployed, "reason": r.reason,
                        "levels": [asdict(lv) for lv in r.levels]} for r in results],
        "winner_per_concurrency": per,
        "winner": best.to_json() if best else None,
        "change": change(spec, best) if best else {},
    }


def _assigns_speculative(node: ast.stmt) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return any(isinstance(t, ast.Name) and t.id == "speculative" for t in targets)


def _declared_in(text: str) -> dict:
    """The `speculative` table the file ends with, run as pyinfra runs a group_data file."""
    namespace = controller.run_group_text(text, "<group_data class file>")
    return namespace.get("speculative") if isinstance(namespace.get("speculative"), dict) else {}


def apply_change(text: str, changed: dict[str, int]) -> str:
    """The class file's text with the winner's keys in its `speculative` table: the value replaced where the
    last top-level `speculative = {...}` names the key, else (or if a later line still sets another value)
    one line appended that overrides it. ValueError: the file declares no speculative table."""
    if not changed:
        return text
    tree = ast.parse(text)
    last = None
    for node in tree.body:
        if _assigns_speculative(node) and node.value is not None:
            last = node
    if last is None:
        raise ValueError("it declares no `speculative = {...}`")
    lines = text.splitlines(keepends=True)
    literal = dict(changed)  # the keys still to find written as int literals of that table
    if isinstance(last.value, ast.Dict):
        spans = []
        for k, v in zip(last.value.keys, last.value.values):
            if isinstance(k, ast.Constant) and k.value in literal and isinstance(v, ast.Constant) and type(v.value) is int \
                    and v.lineno == v.end_lineno:
                spans.append((v.lineno, v.col_offset, v.end_col_offset, literal.pop(k.value)))
        for lineno, start, end, value in sorted(spans, reverse=True):
            line = lines[lineno - 1].encode()  # ast's offsets are in UTF-8 bytes
            lines[lineno - 1] = (line[:start] + str(value).encode() + line[end:]).decode()
    out = "".join(lines)
    declared = _declared_in(out)
    rest = {k: v for k, v in changed.items() if declared.get(k) != v}
    if rest:  # not written as a literal there, or set again later: one override at the end, as group_data's files do
        keys = ", ".join(f'"{k}": {v}' for k, v in rest.items())
        out = out.rstrip("\n") + f"\n\n# make tune --apply\nspeculative = {{**speculative, {keys}}}\n"
    return out


@dataclass(frozen=True)
class TuneMark:
    """The host's tune.json: a make tune began changing it and has not returned it."""

    since: int
    by: str
    candidate: str
    owner: str = ""  # the make tune that made it (its drain's owner, fleet/turns/drains.py); '' for one of before
    until: int = 0  # while the tune goes on: its lease (renewed by each candidate), 0 once it stopped or unknown
    record: RecordKind = RecordKind.TUNE  # the kind the overlay's runs keep their records as (fleet.rollout.intent.Intent.record)


MARK_SINCE_MAX = 1 << 40  # seconds since 1970 (the year 36812), as in pending.json: any later one is no time


def read_mark(text: str | None) -> TuneMark | None:
    """None: no tune.json. One that cannot be read is still a mark (the host may serve a candidate),
    its candidate saying what of the file is wrong: the plan's reason and make status's row show it."""
    if text is None:
        return None
    try:
        data = load_json(text, "tune.json")  # finite numbers, bounded nesting
        if not isinstance(data, dict) or not {"since", "by", "candidate"} <= set(data):
            raise Unreadable("tune.json: expected an object with since, by and candidate")
        since = data["since"]
        if type(since) is not int or not 0 <= since < MARK_SINCE_MAX:  # 1e20 would stop the plan's strftime
            raise Unreadable(f"tune.json: since: expected whole seconds since 1970, 0..{MARK_SINCE_MAX - 1}; "
                             f"found {excerpt(json.dumps(since), 40)}")
    except Unreadable as e:
        return TuneMark(0, "?", f"unreadable {e}")
    until = data.get("until")
    record = data.get("record")
    return TuneMark(since, clipped(str(data["by"]), 200), clipped(str(data["candidate"]), 200),
                    clipped(str(data.get("owner", "")), 256),
                    until if type(until) is int and 0 <= until < MARK_SINCE_MAX else 0,
                    RecordKind(record) if record in (RecordKind.DEPLOY, RecordKind.TUNE) else RecordKind.TUNE)


def mark(since: int, by: str, says: str, owner: tuple[str, float] | None = None,
         record: RecordKind = RecordKind.TUNE) -> dict:
    """tune.json, the mark of a run's overlay (fleet/rollout/intent.py); with its owner and lease, a mark no other run takes
    over until; record: how the overlay's runs keep their records (the return keeps its record so too)."""
    lease = {"owner": owner[0], "until": since + int(owner[1])} if owner else {}
    return {"since": since, "by": by, "candidate": says, **lease, "record": record}


def under_way(m: TuneMark | None, now: float, owner: str | None) -> str | None:
    """Why a run may not touch the host: a make tune other than `owner` (this run's, if a tune's) measures it now,
    its lease running; None if none does (a mark of a tune stopped or cut off is returned by the run)."""
    if m is None or m.until <= now or (owner is not None and owner == m.owner):
        return None
    return (f"expected no make tune under way, found {m.owner or m.by} measuring candidate {m.candidate} (its lease "
            f"{m.until - now:.0f}s more): the host is left as it is; wait for the tune, or stop it (Ctrl-C), then "
            "make deploy")


LAPSE = "sed -i 's/\"until\": [0-9]*/\"until\": 0/'"  # a stopped tune's mark: any run returns the host now
