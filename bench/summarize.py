#!/usr/bin/env python3
"""Helpers of bench/run.sh (standard library only).

    summarize.py record --name NAME --time TIMEFILE [--stdout JSONFILE] [--bytes N]
                        [--extra JSON]
        One JSON line for a command run under `/usr/bin/time -v`: wall time, peak RSS,
        its JSON output (lists of errors/warnings reduced to counts) and MB/s.
    summarize.py sample --out SAMPLE.json --stdout FILE -- CMD...
        Run CMD (stdout to FILE) and poll /proc/PID/status every 50 ms: the peaks of
        anonymous (heap) and file-backed (mmap) resident memory, which `time -v`'s
        single peak RSS does not separate. Exits with CMD's status.
    summarize.py report RESULTS.jsonl
        The summary table of a run.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time


def parse_time_v(path):
    wall = rss = status = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("Elapsed (wall clock) time"):
                parts = line.rsplit(": ", 1)[1].split(":")
                wall = sum(float(x) * 60**i for i, x in enumerate(reversed(parts)))
            elif line.startswith("Maximum resident set size"):
                rss = int(line.rsplit(": ", 1)[1])
            elif line.startswith("Exit status"):
                status = int(line.rsplit(": ", 1)[1])
    return wall, rss, status


def cmd_sample(args):
    keys = {"RssAnon:": "rss_anon_kb", "RssFile:": "rss_file_kb", "VmHWM:": "vm_hwm_kb"}
    peaks = {v: 0 for v in keys.values()}
    with open(args.stdout, "wb") as out:
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        child = subprocess.Popen(command, stdout=out)
        while child.poll() is None:
            try:
                with open(f"/proc/{child.pid}/status", encoding="utf-8") as f:
                    for line in f:
                        parts = line.split()
                        if parts and parts[0] in keys:
                            k = keys[parts[0]]
                            peaks[k] = max(peaks[k], int(parts[1]))
            except (OSError, ValueError, IndexError):
                pass
            time.sleep(0.05)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"peak_" + k: v for k, v in peaks.items()}, f)
    return child.returncode


def cmd_record(args):
    wall, rss, status = parse_time_v(args.time)
    rec = {"bench": args.name, "wall_s": wall, "max_rss_kb": rss, "exit_status": status}
    if args.bytes:
        rec["bytes"] = args.bytes
        if wall:
            rec["mb_per_s"] = args.bytes / 1e6 / wall
    if args.stdout:
        with open(args.stdout, encoding="utf-8") as f:
            text = f.read().strip()
        try:
            out = json.loads(text) if text else None
        except json.JSONDecodeError:
            out = text[:2000]
        if isinstance(out, dict):
            for key in ("errors", "warnings"):
                if isinstance(out.get(key), list):
                    out[key + "_count"] = len(out[key])
                    out[key] = out[key][:3]
        rec["output"] = out
    if args.sample:
        with open(args.sample, encoding="utf-8") as f:
            rec.update(json.load(f))
    if args.extra:
        rec.update(json.loads(args.extra))
    print(json.dumps(rec))


def pooled(lines, impl, variant=None, mode=None):
    """Median of all repetitions over all rounds; also each round's own median."""
    secs, rounds = [], []
    for r in lines:
        if r.get("impl") != impl:
            continue
        if variant is not None and r.get("variant") != variant:
            continue
        if mode is not None and r.get("mode") != mode:
            continue
        secs += r["secs"]
        rounds.append(r)
    if not secs:
        return None
    return statistics.median(secs), rounds


def cmd_report(args):
    with open(args.results, encoding="utf-8") as f:
        recs = [json.loads(line) for line in f if line.strip()]
    out = []
    p = out.append

    for r in recs:
        if r.get("bench") == "meta":
            p(f"run {r['utc']} on {r['cores']} cores ({r['cpu']}), {r['rustc']}, commit {r['commit']}")
            p("")
    idx = [r for r in recs if r.get("bench") == "index"]
    qry = [r for r in recs if r.get("bench") == "query"]
    if idx and qry:
        ndocs = idx[0]["docs"]
        nq = qry[0]["queries"]
        p(f"SciFact: {ndocs} docs, {nq} queries; medians over all repetitions of all rounds")
        p("")
        p(f"{'measurement':<44} {'neuralcore':>12} {'bm25s':>12} {'ratio':>8}")
        bi = pooled(idx, "bm25s")
        for variant, label in (("default", "index docs/s"), ("aligned", "index docs/s (aligned analyzer)")):
            ours = pooled(idx, "neuralcore", variant)
            if ours and bi:
                o, b = ndocs / ours[0], ndocs / bi[0]
                p(f"{label:<44} {o:>12,.0f} {b:>12,.0f} {o / b:>7.2f}x")
        modes = sorted({r.get("mode") for r in qry if r.get("impl") == "bm25s"})
        best = None
        for m in modes:
            b = pooled(qry, "bm25s", mode=m)
            if b and (best is None or b[0] < best[1][0]):
                best = (m, b)
        if best:
            bm, bq = best
            for variant, label in (("default", "queries/s, 1 thread"), ("aligned", "queries/s, 1 thread (aligned)")):
                ours = pooled(qry, "neuralcore", variant)
                if ours:
                    o, b = nq / ours[0], nq / bq[0]
                    p(f"{label:<44} {o:>12,.0f} {b:>12,.0f} {o / b:>7.2f}x")
            p(f"  (bm25s baseline = its fastest single-thread mode: {bm})")
            ours = pooled(qry, "neuralcore", "default")
            for m in modes:
                b = pooled(qry, "bm25s", mode=m)
                ratio = f"; ours (default) is {b[0] / ours[0]:.2f}x this" if ours else ""
                p(f"  bm25s {m:<16} {nq / b[0]:>10,.0f} queries/s{ratio}")
        for variant in sorted({r.get("variant") for r in idx + qry} - {None, "default", "aligned"}):
            oi = pooled(idx, "neuralcore", variant)
            oq = pooled(qry, "neuralcore", variant)
            p(f"  diagnostic, ours {variant}: "
              + (f"index {ndocs / oi[0]:,.0f} docs/s" if oi else "")
              + (f", query {nq / oq[0]:,.0f} queries/s" if oq else ""))
        p("")
        p("per-round ratios (ours default / bm25s), showing noise:")
        ours_i = [r for r in idx if r["impl"] == "neuralcore" and r["variant"] == "default"]
        bm_i = [r for r in idx if r["impl"] == "bm25s"]
        for n, (o, b) in enumerate(zip(ours_i, bm_i), 1):
            p(f"  round {n}: index {o['docs_per_s'] / b['docs_per_s']:.2f}x "
              f"({o['docs_per_s']:,.0f} vs {b['docs_per_s']:,.0f} docs/s)")
        ours_q = [r for r in qry if r["impl"] == "neuralcore" and r["variant"] == "default"]
        bm_q = [r for r in qry if r["impl"] == "bm25s" and r.get("mode") == (best[0] if best else None)]
        for n, (o, b) in enumerate(zip(ours_q, bm_q), 1):
            p(f"  round {n}: query {o['queries_per_s'] / b['queries_per_s']:.2f}x "
              f"({o['queries_per_s']:,.0f} vs {b['queries_per_s']:,.0f} queries/s)")
        nd = {}
        for r in qry:
            key = r["impl"] + ("" if r["impl"] == "bm25s" else f" ({r['variant']})")
            if "ndcg@10" in r:
                nd[key] = r["ndcg@10"]
        if nd:
            p("")
            p("nDCG@10 of the benchmarked rankings (test qrels, sanity check): "
              + ", ".join(f"{k} {v:.4f}" for k, v in sorted(nd.items())))

    for r in recs:
        bench = r.get("bench", "")
        if bench.startswith("ingest"):
            o = r.get("output") or {}
            mbs = f", {r['mb_per_s']:.1f} MB/s" if r.get("mb_per_s") else ""
            extra = ""
            if r.get("peak_rss_anon_kb"):
                mbs += (f"; peak anonymous RSS {r['peak_rss_anon_kb'] / 1024:.1f} MiB, "
                        f"peak file-backed RSS {r['peak_rss_file_kb'] / 1024:.1f} MiB (sampled)")
            if isinstance(o, dict):
                extra = (f"; files {o.get('files_seen')}, failed {o.get('failed')}, "
                         f"documents {o.get('documents')}, chunks {o.get('chunks')}")
            p("")
            p(f"ingest {r.get('corpus')}: {r.get('bytes', 0) / 1e6:.1f} MB in {r['wall_s']:.2f} s wall"
              f"{mbs}; peak RSS {r['max_rss_kb'] / 1024:.1f} MiB; exit {r.get('exit_status')}{extra}")
        elif bench == "data-dir":
            p(f"  data dir afterwards: {r['bytes'] / 1e6:.1f} MB")
        elif bench == "eval":
            s = (r.get("output") or {}).get("summary", {})
            p("")
            p(f"neuralcore eval beir scifact (CLI, reused ingest): nDCG@10 {s.get('ndcg_at_10', float('nan')):.4f}, "
              f"Recall@100 {s.get('recall_at_100', float('nan')):.4f}, "
              f"latency p50 {s.get('latency_p50_ms') or float('nan'):.2f} ms over {s.get('queries')} queries")
    print("\n".join(out))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--name", required=True)
    r.add_argument("--time", required=True)
    r.add_argument("--stdout")
    r.add_argument("--bytes", type=int)
    r.add_argument("--extra")
    r.add_argument("--sample")
    smp = sub.add_parser("sample")
    smp.add_argument("--out", required=True)
    smp.add_argument("--stdout", required=True)
    smp.add_argument("command", nargs=argparse.REMAINDER)
    rep = sub.add_parser("report")
    rep.add_argument("results")
    args = p.parse_args()
    if args.cmd == "record":
        cmd_record(args)
    elif args.cmd == "sample":
        return cmd_sample(args)
    else:
        cmd_report(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
