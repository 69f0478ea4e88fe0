"""Shared pieces of the movement experiments: the small universe, its subsets, and the score.

A plan is an array `owner[q]` (member index per queue). Every subset S of the universe with
kmin <= |S| <= kmax gets a plan; the score adds, over every pair (S, S - {d}), the queues that
differ (counted once for the leave and once for the join back) and divides by what a balanced
plan must move on those events (the same minimum as `rebalance compare`).
"""
import itertools

import numpy as np


def subsets(universe, kmin, kmax):
    return [frozenset(c) for k in range(kmin, kmax + 1)
            for c in itertools.combinations(range(universe), k)]


def min_moves(before, members, queues):
    """Fewest queues a plan over `members` with shares within one must move from `before`."""
    n = len(members)
    base, extra = divmod(queues, n)
    present = set(members)
    sizes = sorted((int((before == m).sum()) for m in members), reverse=True)
    orphaned = sum(1 for o in before if o not in present)
    return orphaned + sum(max(0, s - (base + (1 if i < extra else 0)))
                          for i, s in enumerate(sizes))


def ratio(plans, sets, kmin, queues):
    moved = minimum = 0
    for s in sets:
        if len(s) > kmin:
            for d in s:
                t = s - {d}
                a, b = plans[s], plans[t]
                moved += 2 * int((a != b).sum())
                minimum += min_moves(a, sorted(t), queues) + min_moves(b, sorted(s), queues)
    return moved / minimum
