"""``minLength``/``maxLength`` together with a ``pattern`` or ``format``: narrow the repetitions of
the pattern's token tree until every string it matches has a length within the bounds.

Every character node matches exactly one decoded character, so lengths are exact arithmetic over
the tree. Narrowing only removes strings (sound): lower bounds of repetitions are raised until
the shortest match reaches ``minLength``; branches that cannot fit ``maxLength`` are dropped and
upper bounds lowered to one common cap, the largest that keeps the longest match within
``maxLength`` and the automaton small (``pattern.measure``). The unanchored ends of a pattern are
free-character repetitions; with a ``maxLength`` they become unambiguous (the prefix avoids the
body's first characters, the suffix starts with a character the body never uses), since counted
ambiguous ends blow up the automaton.
"""

from __future__ import annotations

from radixlm.constrained.pattern.chars import FREE, char_ranges, ranges_regex, sre_c
from radixlm.constrained.pattern.ecma import MAX_PATTERN_REPEAT, free_run, search_tokens
from radixlm.constrained.pattern.measure import (
    REPEATS,
    dfa_states,
    item_max,
    item_min,
    item_size,
    max_len,
    min_len,
    positions,
    seq_size,
)

MAX_DFA_STATES = 500  # per narrowed string: about half a second of index building on 32k tokens



def within_length(alts: list, lo: int, hi: int | None) -> bool:
    """Whether every string the pattern alternatives search-match has a length in [lo, hi]."""
    tree = search_tokens(alts)
    return min_len(tree) >= lo and (hi is None or max_len(tree) <= hi)


def narrow_to_length(alts: list, lo: int, hi: int | None, pointer: str) -> tuple[list | None, str]:
    """A token tree matching a subset of the strings the pattern alternatives (see
    ``parse_pattern``) search-match, all of length within [lo, hi] (``hi`` None: unbounded),
    or (None, the keyword that cannot be satisfied)."""
    tree = _cap(_bounded_search(alts, pointer) if hi is not None else search_tokens(alts), None)
    budget = _budget(tree, pointer) if hi is None else 0
    for option in _raise_options(tree, lo, union=True):
        if hi is None:  # raised lower bounds may cost what a linear automaton of them costs
            limit = max(budget, positions(option) + MAX_DFA_STATES)
            best = option if dfa_states(option, limit, pointer) <= limit else None
        else:
            best = None
            for tight in (False, True):
                pruned = _prune(option, hi, tight) if best is None else None
                best = best if pruned is None else _largest_cap(pruned, hi, pointer)
        # The caps of the emitter are applied already: these are the final regex's lengths.
        if best is not None and min_len(best) >= lo and (hi is None or max_len(best) <= hi):
            return best, ""
    return None, "minLength" if hi is None or max_len(tree) < lo else "maxLength"


def _budget(base: list, pointer: str) -> int:
    """DFA states a narrowing of ``base`` may have: MAX_DFA_STATES, or as many as ``base`` (up
    to 8 times that): narrowing must not be what makes the automaton big."""
    return max(MAX_DFA_STATES, dfa_states(base, 8 * MAX_DFA_STATES, pointer))


def _largest_cap(tree: list, hi: int, pointer: str) -> list | None:
    """``tree`` with its repetitions capped so that the longest match is within ``hi`` and the
    automaton stays small (both grow with the caps), or None: first the largest common cap, then
    the repetitions double their own caps in turns while the result still fits."""
    paths = _repeat_paths(tree)
    if max_len(_cap(tree, dict.fromkeys(paths, 0))) > hi:
        return None
    budget = _budget(_cap(tree, dict.fromkeys(paths, 0)), pointer)

    def short(caps: dict) -> bool:
        return max_len(_cap(tree, caps)) <= hi

    def fits(caps: dict) -> bool:
        capped = _cap(tree, caps)
        return max_len(capped) <= hi and dfa_states(capped, budget, pointer) <= budget

    def largest(low: int, high: int, caps_for) -> int:
        # Both tests are monotone in each cap, and the length alone is cheap: when the automaton
        # is small at the largest cap the length allows, that cap is the answer; only otherwise
        # is the automaton measured at every step of the search (below it).
        top = _largest_where(low, high, lambda c: short(caps_for(c)))
        return top if fits(caps_for(top)) else _largest_where(low, top - 1, lambda c: fits(caps_for(c)))

    # The emitter caps counts at MAX_PATTERN_REPEAT anyway: no cap needs to go beyond it.
    tops = {path: min(top, MAX_PATTERN_REPEAT) for path, top in paths.items()}
    common = largest(0, MAX_PATTERN_REPEAT, lambda c: dict.fromkeys(paths, c))
    caps = dict.fromkeys(paths, common)
    growing = [path for path in paths if tops[path] > common]
    while growing:  # rounds of doubling, so that no early repetition takes all the room
        for path in list(growing):
            want = min(tops[path], 2 * caps[path] + 1)
            if fits({**caps, path: want}):
                caps[path] = want
            else:
                caps[path] = largest(caps[path], want - 1, lambda c, p=path: {**caps, p: c})
            if caps[path] < want or want == tops[path]:
                growing.remove(path)
    return _cap(tree, caps)


def _largest_where(low: int, high: int, test) -> int:
    """The largest ``c`` in [low, high] that passes the monotone ``test`` (``low`` when none
    above it does)."""
    while low < high:  # binary search
        mid = (low + high + 1) // 2
        low, high = (mid, high) if test(mid) else (low, mid - 1)
    return low


def _repeat_paths(tokens: list, path: tuple = ()) -> dict[tuple, int]:
    """Every repetition of the tree, by position, with its upper bound (in tree order)."""
    out: dict[tuple, int] = {}
    for i, (op, av) in enumerate(tokens):
        if op in REPEATS:
            out[path + (i,)] = av[1]
            out.update(_repeat_paths(av[2], path + (i,)))
        elif op is sre_c.SUBPATTERN:
            out.update(_repeat_paths(av[-1], path + (i,)))
        elif op is sre_c.BRANCH:
            for j, b in enumerate(av[1]):
                out.update(_repeat_paths(b, path + (i, j)))
    return out


def _cap(tokens: list, caps: dict | None, path: tuple = ()) -> list:
    """Upper bounds lowered to their cap in ``caps`` (by position) and to the emitter's cap,
    never below the lower bound; repetitions left with no copy are removed."""
    out = []
    for i, (op, av) in enumerate(tokens):
        where = path + (i,)
        if op in REPEATS:
            lo, hi, sub = av
            if caps is not None:
                hi = max(lo, min(hi, caps[where]))
            if hi is not sre_c.MAXREPEAT:
                hi = max(lo, min(hi, MAX_PATTERN_REPEAT))
            if hi:
                out.append((op, (lo, hi, _cap(sub, caps, where))))
        elif op is sre_c.SUBPATTERN:
            out.append((op, av[:-1] + (_cap(av[-1], caps, where),)))
        elif op is sre_c.BRANCH:
            out.append((op, (None, [_cap(b, caps, where + (j,)) for j, b in enumerate(av[1])])))
        else:
            out.append((op, av))
    return out


def _prune(seq: list, budget: int, tight: bool = False) -> list | None:
    """Drop what can only match longer than ``budget``: branches whose shortest match does not
    fit beside the rest, copies of repetitions beyond the room left. None if nothing fits.
    ``tight`` also drops what does not fit once every repetition is at its lower bound, so
    that the result fits ``budget`` with all caps at zero (a stronger restriction)."""
    if min_len(seq) > budget:
        return None
    sizes = [item_size(op, av, tight) for op, av in seq]
    out = []
    for (op, av), size in zip(seq, sizes):
        room = budget - (sum(sizes) - size)
        if op in REPEATS:
            lo, hi, sub = av
            per = (room // lo if tight else room - (lo - 1) * min_len(sub)) if lo else room
            sub = _prune(sub, per, tight)
            if sub is None:
                if lo:
                    return None
                continue
            one = seq_size(sub, tight)
            out.append((op, (lo, max(lo, min(hi, room // one)) if one else hi, sub)))
        elif op is sre_c.SUBPATTERN:
            sub = _prune(av[-1], room, tight)
            if sub is None:
                return None
            out.append((op, av[:-1] + (sub,)))
        elif op is sre_c.BRANCH:
            kept = [b for b in (_prune(b, room, tight) for b in av[1]) if b is not None]
            if not kept:
                return None
            out.append((op, (None, kept)))
        elif room < 1:
            return None
        else:
            out.append((op, av))
    return out


def _raise_options(seq: list, need: int, union: bool = False) -> list[list]:
    """Narrowings of ``seq`` whose shortest match is at least ``need``, best first: the union of
    the one-item raises (with ``union``), each one-item raise (least overshoot first), else one
    raise spread over several items. Empty if none exists."""
    cur = min_len(seq)
    if cur >= need:
        return [seq]
    raised = []  # (position, raised item); with ``union`` (the top) also per-copy variants
    for i, item in enumerate(seq):
        for per_copy in (False, True) if union and item[0] in REPEATS else (False,):
            new = _raise_item(item, item_min(*item) + need - cur, per_copy)
            if new is not None and (i, new) not in raised:
                raised.append((i, new))
    if union and len(raised) == 1 and seq[raised[0][0]][0] is sre_c.SUBPATTERN:  # choose inside
        i, (op, av) = raised[0][0], seq[raised[0][0]]
        return [seq[:i] + [(op, av[:-1] + (sub,))] + seq[i + 1:]
                for sub in _raise_options(av[-1], item_min(op, av) + need - cur, union=True)]
    cands = sorted((seq[:i] + [new] + seq[i + 1:] for i, new in raised), key=min_len)
    if union and len(cands) > 1:
        return [[(sre_c.BRANCH, (None, cands))]] + cands
    if cands:
        return cands
    spread = _raise_spread(seq, need - cur)
    return [spread] if spread is not None else []


def _raise_seq(seq: list, need: int) -> list | None:
    options = _raise_options(seq, need)
    return options[0] if options else None


def _raise_spread(seq: list, deficit: int) -> list | None:
    """Raise items in order, each as far as it goes, until ``deficit`` is made up."""
    out = list(seq)
    for i, (op, av) in enumerate(out):
        if deficit <= 0:
            break
        m = item_min(op, av)
        target = min(m + deficit, item_max(op, av))
        new = _raise_item((op, av), int(target)) if target > m else None
        if new is not None:
            out[i] = new
            deficit -= item_min(*new) - m
    return out if deficit <= 0 else None


def _raise_item(item: tuple, target: int, per_copy: bool = False) -> tuple | None:
    """``item`` narrowed so that its shortest match is at least ``target``, or None. A
    repetition gets more copies, or with ``per_copy`` longer ones (fewer counted copies: in
    ``([a-z]+-?)+`` that keeps the automaton small)."""
    op, av = item
    if item_min(op, av) >= target:
        return item
    if op is sre_c.SUBPATTERN:
        sub = _raise_seq(av[-1], target)
        return None if sub is None else (op, av[:-1] + (sub,))
    if op is sre_c.BRANCH:
        kept = [b for b in (_raise_seq(b, target) for b in av[1]) if b is not None]
        return (op, (None, kept)) if kept else None
    if op not in REPEATS:
        return None
    lo, hi, sub = av
    if hi == 0 or max_len(sub) == 0:
        return None
    sub = [(FREE, True) if o == FREE else (o, a) for o, a in sub]  # counted: plain characters
    ms = min_len(sub)
    if ms == 0:
        sub = _raise_seq(sub, 1)
        return None if sub is None else _raise_item((op, (lo, hi, sub)), target)
    count = -(-target // ms)
    if per_copy and max(lo, 1) < count and max(lo, 1) <= hi:
        sub = _raise_seq(sub, -(-target // max(lo, 1)))
        return None if sub is None else (op, (max(lo, 1), hi, sub))
    if hi is sre_c.MAXREPEAT or count <= hi:
        return (op, (count, hi, sub))
    sub = _raise_seq(sub, -(-target // hi))
    return None if sub is None else (op, (hi, hi, sub))


def _bounded_search(alts: list, pointer: str) -> list:
    """``search_tokens`` with unambiguous unanchored ends (see the module docstring)."""
    seqs = []
    for start, end, body in alts:
        if min_len(body) == 0 and not (start and end):  # matches everywhere: any string
            seqs.append([free_run()])
            continue
        seq = [(sre_c.SUBPATTERN, (None, 0, 0, body))]
        prefix = None if start else _not_in(_chars(body, pointer, first=True), pointer)
        if prefix is not None:
            seq.insert(0, (sre_c.MAX_REPEAT, (0, sre_c.MAXREPEAT, [prefix])))
        suffix = None if end else _not_in(_chars(body, pointer), pointer)
        if suffix is not None:
            seq.append((sre_c.MAX_REPEAT, (0, 1, [suffix, free_run()])))
        seqs.append(seq)
    return seqs[0] if len(seqs) == 1 else [(sre_c.BRANCH, (None, seqs))]


def _not_in(ranges: list, pointer: str) -> tuple | None:
    """A class of the characters outside ``ranges`` (None if no emittable one is left)."""
    node = (sre_c.IN, [(sre_c.NEGATE, None)] + [(sre_c.RANGE, r) for r in ranges])
    return node if ranges_regex(char_ranges(*node, pointer)) is not None else None


def _chars(tokens: list, pointer: str, first: bool = False) -> list:
    """Every character a match of ``tokens`` can contain (with ``first``: can start with)."""
    out = []
    for op, av in tokens:
        ranges = char_ranges(op, av, pointer)
        if ranges is None:
            subs = ([av[2]] if av[1] else []) if op in REPEATS else (
                [av[-1]] if op is sre_c.SUBPATTERN else av[1])  # a branch
            ranges = [r for sub in subs for r in _chars(sub, pointer, first)]
        out += ranges
        if first and item_min(op, av):
            break
    return out
