"""A strategy of ours on the same small universe and events as best_table.py, through the
`rebalance allocate` command.

    cargo build --release -p rebalance-cli
    python3 strategy_table.py UNIVERSE QUEUES KMIN KMAX [STRATEGY] [BINARY]
"""
import json
import subprocess
import sys

import numpy as np

from movement_common import ratio, subsets

universe, queues, kmin, kmax = map(int, sys.argv[1:5])
strategy = sys.argv[5] if len(sys.argv) > 5 else "balanced_sticky"
binary = sys.argv[6] if len(sys.argv) > 6 else "target/release/rebalance"
sets = subsets(universe, kmin, kmax)
ids = [f"10.0.{i // 250}.{i % 250 + 1}@{20000 + i}" for i in range(universe)]
mqs = [["TopicTest", f"broker-{i // 16}", i % 16] for i in range(queues)]
cases = [json.dumps({"id": k, "strategy": strategy, "params": {}, "group": "G",
                     "mq_all": mqs, "cid_all": [ids[m] for m in sorted(s)]})
         for k, s in enumerate(sets)]
run = subprocess.run([binary, "allocate"], input="\n".join(cases),
                     capture_output=True, text=True, check=True)
queue_index = {tuple(q): i for i, q in enumerate(mqs)}
member_index = {cid: i for i, cid in enumerate(ids)}
plans = {}
for line in run.stdout.splitlines():
    answer = json.loads(line)
    owner = np.full(queues, -1)
    for cid, share in answer["plan"].items():
        for q in share:
            owner[queue_index[tuple(q)]] = member_index[cid]
    plans[sets[answer["id"]]] = owner
print(f"{strategy}: {ratio(plans, sets, kmin, queues):.3f}")
