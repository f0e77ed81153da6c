#!/usr/bin/env python3
"""Work lost to a `kill -9` during a large ingest (issue 20, item 5).

Runs `neuralcore -v ingest FILE` with the embedding model into a fresh data dir, kills it
with SIGKILL KILL seconds in, then runs the same ingest again and reports:

- batch_lost_s: the time from the last checkpoint (a committed batch, logged at -v) to the
  kill: the embedding work the crash threw away, which must be at most one batch;
- docs_stored: the documents the checkpoints had stored (`sources --json`);
- the rerun: how long until it logged its first checkpoint past the stored documents
  (reading the stored ones again, and bringing the vector index up, is the price of
  resuming), and with --complete its total time;
- with --complete and --full-s (an uninterrupted ingest's time, from `--kill 0`):
  lost_s = kill + rerun - full, the whole cost of the crash.

Every figure is wall time on this machine: name the ISA beside it (the script prints the
CPU's flags it found).

    python3 bench/ingest_resume.py --bin target/release/neuralcore --file corpus.jsonl \
        --model-dir .models/models --kill 60 [--complete] [--full-s 300]
    python3 bench/ingest_resume.py ... --kill 0      # an uninterrupted ingest, timed
    python3 bench/ingest_resume.py --make-copies 10 --file corpus.jsonl --out big.jsonl
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def isa():
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return "unknown"
    return "AVX-512" if "avx512f" in flags else ("AVX2" if "avx2" in flags else "portable")


def make_copies(src, out, n):
    """A file n times as big whose every document is new: each copy's text is prefixed."""
    with open(src) as f, open(out, "w") as o:
        rows = [json.loads(l) for l in f if l.strip()]
        for c in range(n):
            for r in rows:
                r2 = dict(r)
                r2["_id"] = f"{r['_id']}-{c}"
                r2["text"] = f"Copy {c}. {r['text']}"
                o.write(json.dumps(r2) + "\n")
    print(f"wrote {out}: {n * len(rows)} documents, {os.path.getsize(out) / 1e6:.1f} MB")


def run(bin_, data, file, env, kill_at=None, stop_after_new_checkpoint=None):
    """Run the ingest; returns (seconds, checkpoints [(t, docs)], resumed docs, killed)."""
    import queue
    import threading

    start = time.monotonic()
    p = subprocess.Popen(
        [bin_, "--data-dir", data, "-v", "ingest", file],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    lines = queue.Queue()

    def pump():
        for line in p.stderr:
            lines.put((time.monotonic() - start, line))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    checkpoints, resumed, killed = [], 0, False
    while True:
        now = time.monotonic() - start
        if kill_at is not None and now >= kill_at and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            killed = True
        try:
            item = lines.get(timeout=0.05)
        except queue.Empty:
            continue
        if item is None:
            break
        t, line = item
        if "checkpoint" in line and "documents=" in line:
            docs = int(line.split("documents=")[1].split()[0].strip(","))
            checkpoints.append((t, docs))
            if (
                stop_after_new_checkpoint is not None
                and docs > stop_after_new_checkpoint
                and p.poll() is None
            ):
                p.send_signal(signal.SIGKILL)
                killed = True
        elif "resuming" in line:
            resumed = int(line.split(": ")[1].split()[0])
    p.wait()
    return time.monotonic() - start, checkpoints, resumed, killed


def stored(bin_, data, env):
    out = subprocess.run(
        [bin_, "--data-dir", data, "sources", "--json"],
        capture_output=True, text=True, env=env,
    )
    if out.returncode != 0:
        # No collection yet: nothing was committed (a release before batches).
        return 0, False
    s = json.loads(out.stdout)
    return sum(len(x["docs"]) for x in s), any("partial" in x for x in s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin")
    ap.add_argument("--file", required=True)
    ap.add_argument("--model-dir")
    ap.add_argument("--kill", type=float, default=0)
    ap.add_argument("--complete", action="store_true", help="run the rerun to the end")
    ap.add_argument("--full-s", type=float, help="an uninterrupted ingest's seconds")
    ap.add_argument("--make-copies", type=int)
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.make_copies:
        make_copies(a.file, a.out, a.make_copies)
        return
    env = dict(os.environ)
    env["NEURALCORE_EMBEDDING_MODEL_DIR"] = a.model_dir
    data = tempfile.mkdtemp(prefix="nc-resume-")
    try:
        r = {"isa": isa(), "file": a.file, "kill_s": a.kill}
        if a.kill <= 0:
            secs, cps, _, _ = run(a.bin, data, a.file, env)
            r.update(full_s=round(secs, 1), checkpoints=len(cps))
            print(json.dumps(r))
            return
        secs, cps, _, killed = run(a.bin, data, a.file, env, kill_at=a.kill)
        assert killed, "the ingest ended before the kill"
        last = cps[-1] if cps else (0.0, 0)
        docs, partial = stored(a.bin, data, env)
        r.update(
            checkpoints_before_kill=len(cps),
            batch_lost_s=round(a.kill - last[0], 1),
            docs_at_last_checkpoint=last[1],
            docs_stored=docs,
            partial=partial,
            batch_s=round((cps[-1][0] - cps[-2][0]) if len(cps) > 1 else float("nan"), 1),
        )
        if a.complete:
            secs2, cps2, resumed, _ = run(a.bin, data, a.file, env)
            r.update(rerun_s=round(secs2, 1), resumed_docs=resumed)
        else:
            secs2, cps2, resumed, _ = run(
                a.bin, data, a.file, env, stop_after_new_checkpoint=docs
            )
            r.update(resumed_docs=resumed)
        first_new = next((t for t, d in cps2 if d > docs), None)
        r["rerun_first_new_checkpoint_s"] = None if first_new is None else round(first_new, 1)
        if a.complete and a.full_s:
            r["lost_s"] = round(a.kill + r["rerun_s"] - a.full_s, 1)
        print(json.dumps(r))
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
