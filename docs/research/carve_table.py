"""Sequential carving, a jump-hash-like family, scored on the universes of best_table.py.

Members are inserted one at a time in the order of a hash of their id; the k-th takes from every
holder what brings the shares to Q div k (the first Q mod k in that order one more), choosing the
queues it ranks first by a hash of (member, queue). It is exactly minimal when the member last in
that order joins or leaves; any other event changes what every later member takes, which is why
it is scored here next to balanced_sticky and the best table.

    pip install numpy
    python3 carve_table.py UNIVERSE QUEUES KMIN KMAX
"""
import hashlib
import sys

import numpy as np

from movement_common import ratio, subsets


def rank(*key):
    return int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=8).digest(), "big")


def carve(members, queues):
    order = sorted(members, key=lambda m: rank("member", m))
    held = {order[0]: list(range(queues))}
    for k, joiner in enumerate(order[1:], start=2):
        base, extra = divmod(queues, k)
        taken = []
        for i, m in enumerate(order[:k - 1]):
            surplus = len(held[m]) - (base + (i < extra))
            held[m].sort(key=lambda q: rank(joiner, q))
            taken += held[m][:surplus]
            held[m] = held[m][surplus:]
        held[joiner] = taken
    owner = np.empty(queues, dtype=int)
    for m, qs in held.items():
        owner[qs] = m
    return owner


if __name__ == "__main__":
    universe, queues, kmin, kmax = map(int, sys.argv[1:5])
    sets = subsets(universe, kmin, kmax)
    plans = {s: carve(sorted(s), queues) for s in sets}
    print(f"sequential carving: {ratio(plans, sets, kmin, queues):.2f}x the minimum")
