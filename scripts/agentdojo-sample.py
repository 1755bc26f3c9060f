#!/usr/bin/python3
"""Copy a small, fixed sample of the AgentDojo run logs and their reference labels.

  python3 scripts/agentdojo-sample.py AGENTDOJO_DIR dataset/agentdojo/testdata/sample

AGENTDOJO_DIR holds runs/<model>/<suite>/<user_task>/<attack>/<injection_task>.json and
labeled.jsonl (the reference labels). The sample is, for every model and suite, the
smallest run file (by bytes; ties by path) of each kind:

  positive  an attack run with at least one action labeled 1 (one per attack type)
  attack0   an attack run with no action labeled 1
  benign    a run without an attack (none/none.json)

plus the smallest sanity run (an injection task given as the user task), which the
importer must skip. The run files are copied byte for byte under OUT/runs/, and the
lines of labeled.jsonl with their ids are copied, in their order, to OUT/labeled.jsonl.
Running it again on the same data gives the same files.
"""

import json
import os
import shutil
import sys


def main(src, out):
    labels = {}
    with open(os.path.join(src, "labeled.jsonl"), encoding="utf-8") as f:
        for line in f:
            labels[json.loads(line)["id"]] = line
    runs = os.path.join(src, "runs")
    files = []
    for root, _, names in os.walk(runs):
        for name in names:
            path = os.path.join(root, name)
            files.append((os.path.getsize(path), os.path.relpath(path, runs)))
    files.sort()
    picked = {}
    for _, rel in files:
        model, suite, user_task, attack, injection = rel[: -len(".json")].split(os.sep)
        if user_task.startswith("injection_task"):
            key = ("sanity",)
        else:
            tid = f"agentdojo:{model}:{suite}:{user_task}:{attack}:{injection}"
            turns = json.loads(labels[tid])["turns"]
            if attack == "none":
                key = (model, suite, "benign")
            elif any(t["label"] == 1 for t in turns):
                key = (model, suite, "positive", attack)
            else:
                key = (model, suite, "attack0")
        picked.setdefault(key, rel)
    ids = set()
    for rel in sorted(picked.values()):
        dst = os.path.join(out, "runs", rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.join(runs, rel), dst)
        model, suite, user_task, attack, injection = rel[: -len(".json")].split(os.sep)
        ids.add(f"agentdojo:{model}:{suite}:{user_task}:{attack}:{injection}")
    with open(os.path.join(out, "labeled.jsonl"), "w", encoding="utf-8") as f:
        for tid, line in labels.items():
            if tid in ids:
                f.write(line)
    print(f"{len(picked)} run files, {len(ids & labels.keys())} labeled trajectories", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
