#!/usr/bin/env python3
"""Questions about a claudectl-tap.py log, for scripts/claudectl-interop.sh.

    claudectl-taplog.py LOG [--link-taps out,in] COMMAND [options]

A connection is the LASTING link (as opposed to a one-shot) when its handshake was acked
`ok`, did not say `transient: true`, and it came through one of --link-taps (default: any
tap). claudectl 0.64 marks no one-shot as transient, and its serve never dials, so for it
the script passes `--link-taps out`: only the connection our hub dialled can be the link.

Commands (exit 0 when found / true, 1 otherwise):
  find --type T [--task ID] [--want W] [--dir D] [--where link|oneshot|any] [--kind K]
      the first message of msg_type T (for task ID; whose payload `state` or `summary` is
      W) sent in direction D (default to_ctl) on such a connection, framed as K (line or
      frame); prints its payload (--full: the whole record).
  elapsed --task ID --n N
      at least N task_status `running` for ID on the link toward claudectl, the last with a
      larger stats.elapsed_secs than the first; prints the list.
  conns
      one JSON line per connection: conn, tap, transient, lasting, from_peer, version,
      proto, features, binary, closed, messages.
  lz4 --dir D --type T [--contains S]
      a compressed frame in direction D whose decompressed JSON is a T message (containing
      S); and no compressed frame anywhere declares raw_len under 1024 or failed to
      decompress to JSON. Prints what it found.
  errors
      tap parse errors (any direction); exit 0 when there are none.
"""
import argparse
import json
import sys


def load(path):
    recs = []
    with open(path) as f:
        for l in f:
            l = l.strip()
            if l:
                try:
                    recs.append(json.loads(l))
                except ValueError:
                    pass
    return recs


def connections(recs, link_taps):
    conns = {}
    for r in recs:
        c = conns.setdefault(r["conn"], {"conn": r["conn"], "tap": r.get("tap"), "transient": None,
                                         "from_peer": None, "version": None, "proto": None,
                                         "features": None, "ack": None, "binary": False,
                                         "closed": False, "messages": 0})
        d = r["dir"]
        if d == "open":
            c.update(transient=r.get("transient"), from_peer=r.get("from_peer"),
                     version=r.get("version"), proto=r.get("proto"), features=r.get("features"))
        elif d == "ack":
            c.update(ack=r.get("status"), binary=bool(r.get("binary")))
        elif d == "close":
            c["closed"] = True
        elif d in ("to_ctl", "to_hub"):
            c["messages"] += 1
    for c in conns.values():
        c["lasting"] = (c["ack"] == "ok" and c["transient"] is False
                        and (link_taps is None or c["tap"] in link_taps))
    return conns


def messages(recs):
    for r in recs:
        if r["dir"] not in ("to_ctl", "to_hub") or r.get("line") is None:
            continue
        try:
            m = json.loads(r["line"])
        except ValueError:
            continue
        if isinstance(m, dict):
            yield r, m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--link-taps")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("find")
    f.add_argument("--type", required=True)
    f.add_argument("--task")
    f.add_argument("--want")
    f.add_argument("--dir", default="to_ctl")
    f.add_argument("--where", choices=("link", "oneshot", "any"), default="link")
    f.add_argument("--kind", choices=("line", "frame"))
    f.add_argument("--full", action="store_true")
    e = sub.add_parser("elapsed")
    e.add_argument("--task", required=True)
    e.add_argument("--n", type=int, default=2)
    sub.add_parser("conns")
    z = sub.add_parser("lz4")
    z.add_argument("--dir", required=True)
    z.add_argument("--type", required=True)
    z.add_argument("--contains")
    sub.add_parser("errors")
    a = ap.parse_args()

    recs = load(a.log)
    link_taps = set(a.link_taps.split(",")) if a.link_taps else None
    conns = connections(recs, link_taps)

    def where_ok(r, where):
        c = conns.get(r["conn"], {})
        if where == "link":
            return c.get("lasting", False)
        if where == "oneshot":
            return not c.get("lasting", False)
        return True

    if a.cmd == "find":
        for r, m in messages(recs):
            p = m.get("payload")
            if not isinstance(p, dict) or r["dir"] != a.dir or m.get("msg_type") != a.type:
                continue
            if a.task is not None and p.get("task_id") != a.task:
                continue
            if a.want is not None and a.want not in (p.get("state"), p.get("summary")):
                continue
            if not where_ok(r, a.where) or (a.kind and r.get("kind") != a.kind):
                continue
            print(json.dumps(r if a.full else p))
            return 0
        return 1

    if a.cmd == "elapsed":
        el = []
        for r, m in messages(recs):
            p = m.get("payload")
            if (r["dir"] == "to_ctl" and where_ok(r, "link") and m.get("msg_type") == "task_status"
                    and isinstance(p, dict) and p.get("task_id") == a.task
                    and p.get("state") == "running"):
                el.append((p.get("stats") or {}).get("elapsed_secs"))
        print("elapsed_secs %s" % el)
        ok = len(el) >= a.n and el[0] is not None and el[-1] is not None and el[-1] > el[0]
        return 0 if ok else 1

    if a.cmd == "conns":
        for c in sorted(conns.values(), key=lambda c: c["conn"]):
            print(json.dumps(c))
        return 0

    if a.cmd == "lz4":
        bad, found = [], None
        for r in recs:
            if r["dir"] not in ("to_ctl", "to_hub") or not r.get("compressed"):
                continue
            line = r.get("line")
            if r.get("raw_len") is None or r["raw_len"] < 1024:
                bad.append("conn %s %s: compressed frame declares raw_len %s"
                           % (r["conn"], r["dir"], r.get("raw_len")))
            if line is None:
                bad.append("conn %s %s: %s" % (r["conn"], r["dir"], r.get("error")))
                continue
            if len(line.encode()) != r["raw_len"]:
                bad.append("conn %s %s: %d JSON bytes, raw_len %s"
                           % (r["conn"], r["dir"], len(line.encode()), r["raw_len"]))
            try:
                m = json.loads(line)
            except ValueError:
                bad.append("conn %s %s: decompressed body is not JSON" % (r["conn"], r["dir"]))
                continue
            if (found is None and r["dir"] == a.dir and isinstance(m, dict)
                    and m.get("msg_type") == a.type
                    and (a.contains is None or a.contains in line)):
                found = r
        if bad:
            print("; ".join(bad[:5]))
            return 1
        if found is None:
            print("no compressed %s frame %s" % (a.type, a.dir))
            return 1
        frame_len = len(found["hex"]) // 2
        print("conn %s %s: %d-byte frame, raw_len %d, flags 1, decompressed %s"
              % (found["conn"], found["dir"], frame_len, found["raw_len"], a.type))
        return 0

    if a.cmd == "errors":
        errs = [r for r in recs if r["dir"] == "error" or r.get("error")]
        for r in errs[:5]:
            print(json.dumps(r)[:300])
        return 1 if errs else 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
