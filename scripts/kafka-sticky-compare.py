#!/usr/bin/env python3
"""Compares `rebalance assign` with Kafka's sticky and cooperative_sticky vectors, line by line.

For every case: validity (each existing subscribed partition to exactly one subscriber; a
cooperative result may hold back partitions someone owns), the plain spread (max minus min
partitions per member, over members subscribing to at least one existing topic) against
Kafka's, and `moved` against Kafka's. For cooperative cases it also compares the completed
result (our sticky result on the same input) with Kafka's sticky vector on the same input, when
there is one. Findings where Kafka's spread rests on something the issue tells us not to copy
are tagged with the reason.

    cargo build --release -p rebalance-cli
    python3 scripts/kafka-sticky-compare.py [--vectors FILE] [--bin PATH] [--rows OUT.json]
"""
import argparse
import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
STICKY = ("sticky", "cooperative_sticky")


def run(binary, cases):
    lines = "".join(json.dumps(c) + "\n" for c in cases)
    out = subprocess.run([binary, "assign"], input=lines, capture_output=True, text=True)
    return [json.loads(l) for l in out.stdout.splitlines()]


def exists(c, t, p):
    n = c["partitions_per_topic"].get(t)
    return n is not None and 0 <= p < n


def subscriptions(c):
    """Each member's existing subscribed topics."""
    counts = c["partitions_per_topic"]
    return {m: {t for t in v["topics"] if counts.get(t, 0) > 0} for m, v in c["members"].items()}


def spread(c, a, existing_only=True):
    subs = subscriptions(c)
    sizes = [
        sum(exists(c, t, p) or not existing_only for t, p in a.get(m, [])) for m in subs if subs[m]
    ]
    return max(sizes) - min(sizes) if sizes else 0


def moved(c, a):
    listed = {}
    for m, v in c["members"].items():
        for t, p in v["owned"]:
            listed.setdefault((t, p), set()).add(m)
    return sum(
        1
        for (t, p), ms in listed.items()
        if exists(c, t, p) and any([t, p] not in a.get(m, []) for m in ms)
    )


def problems(c, a, cooperative):
    subs = subscriptions(c)
    seen, found = set(), []
    for m, lst in a.items():
        for t, p in lst:
            if (t, p) in seen:
                found.append(f"{t}-{p} twice")
            seen.add((t, p))
            if not exists(c, t, p) or t not in subs[m]:
                found.append(f"{m} got {t}-{p}")
    listed = {(t, p) for v in c["members"].values() for t, p in v["owned"]}
    for t in set().union(*subs.values()):
        for p in range(c["partitions_per_topic"][t]):
            if (t, p) not in seen and not (cooperative and (t, p) in listed):
                found.append(f"{t}-{p} unassigned")
    return found


def kafka_quirks(c, kafka):
    """What Kafka's result rests on that we do not copy."""
    subs = subscriptions(c)
    why = []
    if any(kafka.get(m) and not subs[m] for m in subs):
        why.append("partitions to a member without a subscription")
    if any(t not in subs[m] for m, l in kafka.items() for t, _ in l if subs[m]):
        why.append("a partition of an unsubscribed topic")
    if any(not exists(c, t, p) for l in kafka.values() for t, p in l):
        why.append("a nonexistent partition (not counted)")
    return why


def key(c):
    return json.dumps([c["partitions_per_topic"], c["members"], c["partition_racks"]], sort_keys=True)


def main():
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--vectors", default=ROOT / "tests/data/kafka-assign.jsonl")
    args.add_argument("--bin", default=TARGET / "release/rebalance")
    args.add_argument("--rows", help="write per-case [ours, Kafka's] spread and moved as JSON")
    opts = args.parse_args()

    cases = [json.loads(l) for l in open(opts.vectors)]
    cases = [c for c in cases if c["assignor"] in STICKY and c["expected"] is not None]
    ours = run(opts.bin, cases)
    completed = run(opts.bin, [dict(c, assignor="sticky") for c in cases])
    kafka_completed = {key(c): c["expected"] for c in cases if c["assignor"] == "sticky"}

    rows, findings = {}, []
    for c, o, done in zip(cases, ours, completed):
        cooperative = c["assignor"] == "cooperative_sticky"
        a, kafka = o["assignment"] or {}, c["expected"]
        found = problems(c, a, cooperative)
        quirks = kafka_quirks(c, kafka)
        tag = f" [Kafka's result has {'; '.join(quirks)}]" if quirks else ""
        row = [spread(c, a), spread(c, kafka), moved(c, a), c["moved"]]
        rows[c["id"]] = row
        if row[0] > row[1]:
            found.append(f"{'round-one ' if cooperative else ''}spread {row[0]} > Kafka's {row[1]}{tag}")
        elif row[0] > spread(c, kafka, existing_only=False):
            found.append(
                f"spread {row[0]} > Kafka's {spread(c, kafka, existing_only=False)} only when its "
                f"nonexistent partitions count{tag}"
            )
        if row[2] > row[3]:
            found.append(f"moved {row[2]} > Kafka's {row[3]}")
        if cooperative and key(c) in kafka_completed:
            target = kafka_completed[key(c)]
            ours_done, kafka_done = spread(c, done["assignment"]), spread(c, target)
            if ours_done > kafka_done:
                found.append(f"completed spread {ours_done} > Kafka's {kafka_done}{tag}")
        if found:
            findings.append(f"{c['id']}: {'; '.join(found)}")

    for f in findings:
        print(f)
    s = lambda i, j, op: sum(op(r[i], r[j]) for r in rows.values())
    print(
        f"{len(rows)} cases; spread ours <, =, > Kafka's: {s(0, 1, int.__lt__)}, "
        f"{s(0, 1, int.__eq__)}, {s(0, 1, int.__gt__)}; moved ours <, =, > Kafka's: "
        f"{s(2, 3, int.__lt__)}, {s(2, 3, int.__eq__)}, {s(2, 3, int.__gt__)}; "
        f"{len(findings)} with a finding"
    )
    if opts.rows:
        json.dump(rows, open(opts.rows, "w"), indent=0)


if __name__ == "__main__":
    main()
