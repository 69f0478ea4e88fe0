"""How close to the minimum can ANY stateless balanced plan get?

A stateless strategy is a function of the member set, so on a small universe it is just a table:
one balanced plan per subset. This searches that table directly (coordinate descent: each plan in
turn becomes the balanced plan closest to its neighbours', an assignment problem solved exactly),
starting from a rendezvous-style formula (the min-cost balanced plan for random queue-member
costs). The result is a local optimum, in a universe far smaller than real groups see (only a few
possible joiners), so it is evidence, not a bound.

    pip install numpy scipy
    python3 best_table.py UNIVERSE QUEUES KMIN KMAX ITERATIONS
"""
import sys

import numpy as np
from scipy.optimize import linear_sum_assignment

from movement_common import ratio, subsets

universe, queues, kmin, kmax, iterations = map(int, sys.argv[1:6])
rng = np.random.default_rng(1)
sets = subsets(universe, kmin, kmax)
affinity = rng.random((queues, universe))


def balanced(members, cost):
    """The cheapest plan giving each member its floor, and the leftovers one each."""
    base, extra = divmod(queues, len(members))
    big = 1e6
    columns, costs = [], []
    for m in members:
        for _ in range(base):
            columns.append(m)
            costs.append(cost[:, m] - big)
        if extra:
            columns.append(m)
            costs.append(cost[:, m])
    rows, cols = linear_sum_assignment(np.stack(costs, axis=1))
    owner = np.empty(queues, dtype=int)
    owner[rows] = np.array(columns)[cols]
    return owner


def neighbours(s):
    down = [s - {d} for d in s] if len(s) > kmin else []
    up = [s | {x} for x in range(universe) if x not in s] if len(s) < kmax else []
    return down + up


plans = {s: balanced(sorted(s), -affinity) for s in sets}
print(f"formula (min-cost rendezvous): {ratio(plans, sets, kmin, queues):.3f}", flush=True)
for it in range(iterations):
    for i in rng.permutation(len(sets)):
        s = sets[i]
        members = sorted(s)
        cost = np.zeros((queues, universe))
        for t in neighbours(s):
            owner = plans[t]
            cost += 1
            kept = np.isin(owner, members)
            cost[np.arange(queues)[kept], owner[kept]] -= 1
        plans[s] = balanced(members, cost - 1e-3 * affinity)
    print(f"table after {it + 1} rounds: {ratio(plans, sets, kmin, queues):.3f}", flush=True)
